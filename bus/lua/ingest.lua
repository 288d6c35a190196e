-- ingest.lua: take one message into a session's inbox, once.
-- All keys are in the receiver's slot {<sid>}.
-- KEYS[1] msgs     P:{sid}:msgs     message id -> inbox record JSON
-- KEYS[2] new      P:{sid}:new      ids not yet carried by a notice -> arrival ms
-- KEYS[3] wakeq    P:{sid}:wakeq    the wake-worthy subset of new
-- KEYS[4] threads  P:{sid}:threads  thread id -> newest ms
-- KEYS[5] events   P:{sid}:events   durability records
-- ARGV[1] message id, ARGV[2] record JSON, ARGV[3] arrival ms, ARGV[4] "1" if it may wake,
-- ARGV[5] thread id, ARGV[6] "1" if it counts as new (not the session's own message)
-- Returns 1 if taken, 0 if it was already there (a redone delivery).
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2]) == 0 then
  return 0
end
if ARGV[6] == '1' then
  redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
  if ARGV[4] == '1' then
    redis.call('ZADD', KEYS[3], ARGV[3], ARGV[1])
  end
end
redis.call('ZADD', KEYS[4], 'GT', ARGV[3], ARGV[5])
redis.call('XADD', KEYS[5], 'MAXLEN', '~', 10000, '*', 'kind', 'inbox', 'id', ARGV[1],
  'thread', ARGV[5], 'at', ARGV[3], 'wakes', ARGV[4])
return 1
