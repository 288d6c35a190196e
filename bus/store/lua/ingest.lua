-- ingest.lua: take messages into a session's inbox, each once.
-- All keys are in the receiver's slot {<sid>}.
-- KEYS[1] msgs     P:{sid}:msgs     message id -> inbox record JSON
-- KEYS[2] new      P:{sid}:new      ids not yet carried by a notice -> arrival ms
-- KEYS[3] wakeq    P:{sid}:wakeq    the wake-worthy subset of new
-- KEYS[4] threads  P:{sid}:threads  thread id -> newest ms
-- KEYS[5] events   P:{sid}:events   durability records
-- ARGV[1] message id, ARGV[2] record JSON, ARGV[3] arrival ms, ARGV[4] "1" if it may wake,
-- ARGV[5] thread id (a message the session sent itself is new like any other)
-- ARGV[6..10], ...: more messages, five arguments each, taken in order (a batch's
-- delivery takes a session's messages in one call).
-- Returns how many were taken (0 for one already there: a redone delivery).
local function take(A)
  if redis.call('HSETNX', KEYS[1], A[1], A[2]) == 0 then
    return 0
  end
  redis.call('ZADD', KEYS[2], A[3], A[1])
  if A[4] == '1' then
    redis.call('ZADD', KEYS[3], A[3], A[1])
  end
  redis.call('ZADD', KEYS[4], 'GT', A[3], A[5])
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', 10000, '*', 'kind', 'inbox', 'id', A[1],
    'thread', A[5], 'at', A[3], 'wakes', A[4])
  return 1
end
local taken = 0
for i = 0, #ARGV - 1, 5 do
  taken = taken + take({unpack(ARGV, i + 1, i + 5)})
end
return taken
