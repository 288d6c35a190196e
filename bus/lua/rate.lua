-- rate.lua: take one token from a sender's bucket (issue 9: bounded floods).
-- KEYS[1] bucket  P:{snd:<sender>}:bucket  hash: tokens (float), at (ms of last refill)
-- ARGV[1] sustained rate (tokens per second), ARGV[2] burst (bucket size)
-- Returns 1 when a token was taken, 0 when the bucket is empty (the send is refused).
-- The clock is Redis's own, so every client's sends count against one timeline.
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(b[1]) or burst
local at = tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
local ok = 0
if tokens >= 1 then
  tokens = tokens - 1
  ok = 1
end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
-- A full bucket is the same as no bucket: let the key go once it would be full again.
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / math.max(rate, 0.001) * 1000) + 1000)
return ok
