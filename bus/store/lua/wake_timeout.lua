-- wake_timeout.lua: a session woken (notice_finish.lua set it running and woken_at) whose
-- harness never reported its turn's start (that clears woken_at) goes back to idle once
-- its wake is old enough, with a 'wake_timeout' record. Keys in the session's slot.
-- KEYS[1] session P:{sid}:session
-- KEYS[2] events  P:{sid}:events
-- ARGV[1] cutoff ms: a wake at or before it timed out
-- ARGV[2] now ms (the session's updated_at and the record's time)
-- Returns 1 when the session went back to idle, else 0.
local s = redis.call('HMGET', KEYS[1], 'state', 'woken_at')
if s[1] ~= 'running' or not s[2] or s[2] == '' then
  return 0
end
if tonumber(s[2]) > tonumber(ARGV[1]) then
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'idle', 'updated_at', ARGV[2])
redis.call('HDEL', KEYS[1], 'woken_at')
redis.call('XADD', KEYS[2], 'MAXLEN', '~', 10000, '*', 'kind', 'wake_timeout', 'at', ARGV[2],
  'woken_at', s[2])
return 1
