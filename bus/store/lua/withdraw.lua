-- withdraw.lua: unsend a message no notice has carried, or say what else to do.
-- KEYS[1] ids P:{sid}:ids, KEYS[2] msgs, KEYS[3] new, KEYS[4] wakeq, KEYS[5] notice,
-- KEYS[6] events
-- ARGV[1] message id, ARGV[2] now ms
-- Returns {verdict, detail}: unknown | already | unsent | wait (notice id) | retract (mark)
local ans_raw = redis.call('HGET', KEYS[1], ARGV[1])
if not ans_raw then return {'unknown', ''} end
local ans = cjson.decode(ans_raw)
if ans.state == 'withdrawn' then return {'already', ''} end
local function unsend()
  ans.state = 'withdrawn'
  redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(ans))
  redis.call('XADD', KEYS[6], 'MAXLEN', '~', 10000, '*', 'kind', 'inbox_removed',
    'id', ARGV[1], 'at', ARGV[2])
end
local raw = redis.call('HGET', KEYS[2], ARGV[1])
if not raw then
  -- Stored but not yet taken by a delivery: the delivery skips withdrawn ids.
  unsend()
  return {'unsent', ''}
end
local rec = cjson.decode(raw)
if redis.call('ZREM', KEYS[3], ARGV[1]) == 1 then
  redis.call('ZREM', KEYS[4], ARGV[1])
  rec.mark = 'removed'
  redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(rec))
  unsend()
  return {'unsent', ''}
end
local building = redis.call('HGET', KEYS[5], 'ids')
if building then
  for _, id in ipairs(cjson.decode(building)) do
    if id == ARGV[1] then return {'wait', redis.call('HGET', KEYS[5], 'id')} end
  end
end
if rec.mark == 'retracted' then return {'already', ''} end
local prior = rec.mark
rec.mark = 'retracted'
redis.call('HSET', KEYS[2], ARGV[1], cjson.encode(rec))
ans.state = 'retracted'
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(ans))
redis.call('XADD', KEYS[6], 'MAXLEN', '~', 10000, '*', 'kind', 'inbox_retracted',
  'id', ARGV[1], 'at', ARGV[2])
return {'retract', prior}
