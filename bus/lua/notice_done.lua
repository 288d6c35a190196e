-- notice_done.lua: the notice in flight went in.
-- KEYS[1] notice P:{sid}:notice, KEYS[2] msgs, KEYS[3] carried, KEYS[4] floor, KEYS[5] events
-- ARGV[1] notice id, ARGV[2] now ms, ARGV[3] "socket" (acked: its messages are noticed) or
-- "file" (on the floor: noticed when the drain takes it)
-- Returns the ids of the notice, or false when it is not the one in flight.
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then
  return false
end
local ids_json = redis.call('HGET', KEYS[1], 'ids')
local ids = cjson.decode(ids_json)
redis.call('DEL', KEYS[1])
if ARGV[3] == 'socket' then
  for _, id in ipairs(ids) do
    local raw = redis.call('HGET', KEYS[2], id)
    if raw then
      local rec = cjson.decode(raw)
      if rec.mark == 'new' then
        rec.mark = 'noticed'
        rec.notice = ARGV[1]
        redis.call('HSET', KEYS[2], id, cjson.encode(rec))
        redis.call('SADD', KEYS[3], id)
      end
    end
  end
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', 10000, '*', 'kind', 'inbox_noticed',
    'notice', ARGV[1], 'ids', ids_json, 'at', ARGV[2], 'via', 'socket')
else
  redis.call('HSET', KEYS[4], ARGV[1], ids_json)
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', 10000, '*', 'kind', 'notice_written',
    'notice', ARGV[1], 'ids', ids_json, 'at', ARGV[2], 'via', 'file')
end
return ids
