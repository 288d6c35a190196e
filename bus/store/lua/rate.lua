-- rate.lua: take tokens from a sender's bucket (bounded floods).
-- KEYS[1] bucket  P:{snd:<sender>}:bucket  hash: tokens (float), at (ms of last refill)
-- ARGV[1] sustained rate (tokens per second), ARGV[2] burst (bucket size),
-- ARGV[3] (optional, default 1) tokens wanted: a batch takes one per message in one call;
--         a negative count gives tokens back (a whole batch refused after this one took),
-- ARGV[4] (optional) '1': take as many as there are, up to the count (a --jsonl chunk);
--         else all or none (a single send, a batch refused whole)
-- Returns the number of tokens taken (0 when refused: nothing is stored).
-- The clock is Redis's own, so every client's sends count against one timeline.
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3] or '1') or 1
local partial = ARGV[4] == '1'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local b = redis.call('HMGET', KEYS[1], 'tokens', 'at')
local tokens = tonumber(b[1]) or burst
local at = tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - at) * rate / 1000)
local took = 0
if want < 0 then
  tokens = math.min(burst, tokens - want)
elseif tokens >= want then
  took = want
elseif partial then
  took = math.floor(tokens)
end
tokens = tokens - took
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'at', tostring(now))
-- A full bucket is the same as no bucket: let the key go once it would be full again.
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / math.max(rate, 0.001) * 1000) + 1000)
return took
