-- take_due.lua: take every due entry of the schedule, atomically, so two schedulers
-- running at once never take the same wake twice.
-- KEYS[1] due  P:due  zset "<what>|<sid>" -> due ms
-- ARGV[1] now ms, ARGV[2] max entries
local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #items > 0 then
  redis.call('ZREM', KEYS[1], unpack(items))
end
return items
