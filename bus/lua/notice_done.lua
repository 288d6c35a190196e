-- notice_done.lua: the notice in flight was written to the floor file; it waits there for
-- a drain, recorded in the floor hash until a drain confirms it (floor_drained.lua) or
-- the sweep finds it taken off and never confirmed (floor_sweep.lua).
-- KEYS[1] notice P:{sid}:notice, KEYS[2] msgs, KEYS[3] carried, KEYS[4] floor, KEYS[5] events
-- ARGV[1] notice id, ARGV[2] now ms, ARGV[3] "file"
-- Returns the ids of the notice, or false when it is not the one in flight (a drain that
-- took the line off the floor first has already confirmed it).
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then
  return false
end
local ids_json = redis.call('HGET', KEYS[1], 'ids')
local record = {
  ids = cjson.decode(ids_json),
  new = cjson.decode(redis.call('HGET', KEYS[1], 'new') or '[]'),
  wake = cjson.decode(redis.call('HGET', KEYS[1], 'wake') or '[]'),
  at = tonumber(ARGV[2]),
}
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[4], ARGV[1], cjson.encode(record))
redis.call('XADD', KEYS[5], 'MAXLEN', '~', 10000, '*', 'kind', 'notice_written',
  'notice', ARGV[1], 'ids', ids_json, 'at', ARGV[2], 'via', ARGV[3])
return record.ids
