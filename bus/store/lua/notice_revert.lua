-- notice_revert.lua: a notice that did not go in gives its ids back, still new.
-- KEYS[1] notice P:{sid}:notice, KEYS[2] new, KEYS[3] wakeq, KEYS[4] events
-- ARGV[1] notice id, ARGV[2] now ms, ARGV[3] reason
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then
  return 0
end
local new = cjson.decode(redis.call('HGET', KEYS[1], 'new') or '[]')
local wake = cjson.decode(redis.call('HGET', KEYS[1], 'wake') or '[]')
for i = 1, #new, 2 do redis.call('ZADD', KEYS[2], new[i + 1], new[i]) end
for i = 1, #wake, 2 do redis.call('ZADD', KEYS[3], wake[i + 1], wake[i]) end
redis.call('DEL', KEYS[1])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', 10000, '*', 'kind', 'notice_reverted',
  'notice', ARGV[1], 'at', ARGV[2], 'reason', ARGV[3])
return 1
