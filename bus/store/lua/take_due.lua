-- take_due.lua: take every due entry of the schedule, atomically, so two schedulers
-- running at once never take the same wake twice. With a taker, only the scheduler
-- holding the taker claim takes them (it claims it when free and renews it each take):
-- the others wait out its claim rather than each wake for every due time.
-- KEYS[1] due    P:due          zset "<what>|<sid>" -> due ms
-- KEYS[2] taker  {P:due}:taker  string: the scheduler taking due entries, for ARGV[4] ms
--                               (optional; its hash tag is due's whole name: one slot)
-- ARGV[1] now ms, ARGV[2] max entries, ARGV[3] this scheduler's name, ARGV[4] claim ms
-- Returns the entries taken; with KEYS[2], {entries, the ms another's claim has left (0:
-- this scheduler holds it and took), the earliest due time left or false}.
if KEYS[2] then
  local held = redis.call('GET', KEYS[2])
  if held and held ~= ARGV[3] then
    return {{}, math.max(1, redis.call('PTTL', KEYS[2])), false}
  end
  redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
end
local items = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
if #items > 0 then
  redis.call('ZREM', KEYS[1], unpack(items))
end
if not KEYS[2] then
  return items
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {items, 0, first[2] or false}
