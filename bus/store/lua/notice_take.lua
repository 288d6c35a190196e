-- notice_take.lua: start the one notice in flight for a session, taking every new id.
-- KEYS[1] notice  P:{sid}:notice  hash: id, ids (JSON), new (JSON [id, ms, ...]), wake, at
-- KEYS[2] new     P:{sid}:new
-- KEYS[3] wakeq   P:{sid}:wakeq
-- KEYS[4] events  P:{sid}:events
-- KEYS[5] msgs    P:{sid}:msgs (optional)
-- ARGV[1] notice id, ARGV[2] now ms
-- Returns the ids taken, or false when a notice is already in flight or nothing is new;
-- with KEYS[5], JSON-encoded [ids, their inbox records (HMGET, in order, false where
-- none)]: the records the notice summarises, in the same round trip (one string for the
-- client to parse, not a nested reply).
if redis.call('EXISTS', KEYS[1]) == 1 then
  return false
end
local ids = redis.call('ZRANGE', KEYS[2], 0, -1)
if #ids == 0 then
  return false
end
local new = redis.call('ZRANGE', KEYS[2], 0, -1, 'WITHSCORES')
local wake = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
redis.call('HSET', KEYS[1], 'id', ARGV[1], 'ids', cjson.encode(ids), 'new', cjson.encode(new),
  'wake', cjson.encode(wake), 'at', ARGV[2])
redis.call('DEL', KEYS[2], KEYS[3])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', 10000, '*', 'kind', 'notice_built', 'notice', ARGV[1],
  'at', ARGV[2])
if KEYS[5] then
  -- In chunks: unpack() of thousands of ids would overflow Lua's stack.
  local records = {}
  for i = 1, #ids, 1000 do
    local part = redis.call('HMGET', KEYS[5], unpack(ids, i, math.min(i + 999, #ids)))
    for j = 1, #part do
      records[#records + 1] = part[j]
    end
  end
  return cjson.encode({ids, records})
end
return ids
