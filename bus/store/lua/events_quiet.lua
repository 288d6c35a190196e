-- events_quiet.lua: drop a quiet session's events stream (a stream costs a node's
-- memory however few its records). Its records are an audit trail nothing replays;
-- live readers (a --wait, a withdrawal) block for records after the newest, and a stream
-- made again by the next record has ids after it (the server's clock), so they miss
-- nothing. A reader blocked on the key stays blocked and gets that next record.
-- KEYS[1] events  P:{sid}:events  the session's durability records
-- KEYS[2] subs    P:{sid}:subs    durable subscriptions' cursors (bus.services.durable_watch),
--                                 each '<events id>|<ms of its last use>': while one was used
--                                 within ARGV[2], the session's events are kept
-- ARGV[1] quiet ms: dropped only when its newest record is older than that (the server's
--         clock, the one its ids come from)
-- ARGV[2] idle ms: a cursor unused this long keeps nothing (INBOX_SUB_IDLE_S); one
--         without a time (written before cursors carried one) counts as unused
-- A dropped stream's idle cursors that had not reached its newest record become
-- 'gone|<ms>': their subscription is refused cursor_expired when it comes back, rather
-- than silently skipping what it never read.
-- Returns the bytes freed by MEMORY USAGE (0: kept).
local now = redis.call('TIME')
local now_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local cursors = {}
if KEYS[2] then
  cursors = redis.call('HGETALL', KEYS[2])
  for i = 2, #cursors, 2 do
    local at = tonumber(string.match(cursors[i], '^[0-9]+%-[0-9]+|(%d+)$'))
    if at ~= nil and at >= now_ms - tonumber(ARGV[2]) then
      return 0
    end
  end
end
local last = redis.call('XREVRANGE', KEYS[1], '+', '-', 'COUNT', 1)
if last[1] == nil then
  return 0
end
local cutoff = now_ms - tonumber(ARGV[1])
local ms = tonumber(string.match(last[1][1], '^(%d+)'))
if ms == nil or ms >= cutoff then
  return 0
end
local used = redis.call('MEMORY', 'USAGE', KEYS[1], 'SAMPLES', 0)
redis.call('DEL', KEYS[1])
for i = 1, #cursors, 2 do
  local cursor = string.match(cursors[i + 1], '^([^|]*)')
  if cursor ~= last[1][1] and cursor ~= 'gone' then
    redis.call('HSET', KEYS[2], cursors[i], 'gone|' .. now_ms)
  end
end
return used
