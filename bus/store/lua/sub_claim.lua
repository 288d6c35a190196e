-- sub_claim.lua: a reader takes (or uses again) one of its own durable subscriptions,
-- at most ARGV[4] of them in use (bus.services.durable_watch.reader_subscription).
-- KEYS[1] rsubs  P:{reader}:rsubs  zset: the reader's subscription names -> last use ms
-- ARGV[1] name   the subscription's name (the reader's own word)
-- ARGV[2] now    ms
-- ARGV[3] idle   ms: a name unused this long is forgotten
-- ARGV[4] most   names a reader holds at once
-- Returns 1 (taken, its use now) or 0 (a new name past the most: nothing written).
local now, idle, most = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - idle))
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) and redis.call('ZCARD', KEYS[1]) >= most then
  return 0
end
redis.call('ZADD', KEYS[1], now, ARGV[1])
redis.call('PEXPIRE', KEYS[1], idle)
return 1
