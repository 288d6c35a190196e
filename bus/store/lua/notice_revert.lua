-- notice_revert.lua: a notice that did not go in gives its ids back, still new.
-- KEYS[1] notice P:{sid}:notice, KEYS[2] new, KEYS[3] wakeq, KEYS[4] events,
-- KEYS[5] msgs (only with ARGV[4])
-- ARGV[1] notice id, ARGV[2] now ms, ARGV[3] reason, ARGV[4] "1": the notice may have
-- been heard (a worker killed after its write), so each record given back is marked
-- ``again`` (parts/mark_again.lua) and the next notice lists it as redelivered
if redis.call('HGET', KEYS[1], 'id') ~= ARGV[1] then
  return 0
end
--@include mark_again
local new = cjson.decode(redis.call('HGET', KEYS[1], 'new') or '[]')
local wake = cjson.decode(redis.call('HGET', KEYS[1], 'wake') or '[]')
for i = 1, #new, 2 do redis.call('ZADD', KEYS[2], new[i + 1], new[i]) end
for i = 1, #wake, 2 do redis.call('ZADD', KEYS[3], wake[i + 1], wake[i]) end
if ARGV[4] == '1' and KEYS[5] then
  for i = 1, #new, 2 do mark_again(KEYS[5], new[i]) end
end
redis.call('DEL', KEYS[1])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', 10000, '*', 'kind', 'notice_reverted',
  'notice', ARGV[1], 'at', ARGV[2], 'reason', ARGV[3])
return 1
