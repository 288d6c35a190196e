-- events_quiet.lua: drop a quiet session's events stream (a stream costs
-- ~1-1.6 KB however few its records). Its records are an audit trail nothing replays;
-- live readers (a --wait, a withdrawal) block for records after the newest, and a stream
-- made again by the next record has ids after it (the server's clock), so they miss
-- nothing. A reader blocked on the key stays blocked and gets that next record.
-- KEYS[1] events  P:{sid}:events  the session's durability records
-- KEYS[2] subs    P:{sid}:subs    durable subscriptions' cursors (bus.services.durable_watch): while one
--                                 follows the session, its events are kept
-- ARGV[1] quiet ms: dropped only when its newest record is older than that (the server's
--         clock, the one its ids come from)
-- Returns the bytes freed by MEMORY USAGE (0: kept).
if KEYS[2] and redis.call('EXISTS', KEYS[2]) == 1 then
  return 0
end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if last[1] == nil then
  return 0
end
local now = redis.call('TIME')
local cutoff = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - tonumber(ARGV[1])
local ms = tonumber(string.match(last[1][1], '^(%d+)'))
if ms == nil or ms >= cutoff then
  return 0
end
local used = redis.call('MEMORY', 'USAGE', KEYS[1], 'SAMPLES', 0)
redis.call('DEL', KEYS[1])
return used
