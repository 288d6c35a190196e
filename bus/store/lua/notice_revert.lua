-- notice_revert.lua: a notice that did not go in gives its ids back, still new.
-- KEYS[1] notice P:{sid}:notice, KEYS[2] new, KEYS[3] wakeq, KEYS[4] events,
-- KEYS[5] msgs (only with ARGV[4])
-- ARGV[1] notice id, ARGV[2] now ms, ARGV[3] reason, ARGV[4] "1": the notice may have
-- been heard (a worker killed after its write), so each record given back is marked
-- ``again`` (parts/mark_again.lua) and the next notice lists it as redelivered
local f = redis.call('HMGET', KEYS[1], 'id', 'new', 'wake')
if f[1] ~= ARGV[1] then
  return 0
end
--@include mark_again
local new = cjson.decode(f[2] or '[]')
local wake = cjson.decode(f[3] or '[]')
-- A flat [member, score, ...] list back into its set, one ZADD a chunk: unpack() of
-- thousands of arguments would overflow Lua's stack.
local function give_back(key, flat)
  for i = 1, #flat, 1000 do
    local args = {}
    for j = i, math.min(i + 999, #flat), 2 do
      args[#args + 1] = flat[j + 1]
      args[#args + 1] = flat[j]
    end
    redis.call('ZADD', key, unpack(args))
  end
end
give_back(KEYS[2], new)
give_back(KEYS[3], wake)
if ARGV[4] == '1' and KEYS[5] then
  for i = 1, #new, 2 do mark_again(KEYS[5], new[i]) end
end
redis.call('DEL', KEYS[1])
redis.call('XADD', KEYS[4], 'MAXLEN', '~', 10000, '*', 'kind', 'notice_reverted',
  'notice', ARGV[1], 'at', ARGV[2], 'reason', ARGV[3])
return 1
