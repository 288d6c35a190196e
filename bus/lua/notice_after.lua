-- notice_after.lua: the session's side of a notice's write, after notice_done.lua or
-- floor_drained.lua (bus.store_delivery.finish_notice), in one call: what were three
-- commands a notice (issue 13: a due wake's replies to parse).
-- KEYS[1] session P:{sid}:session
-- KEYS[2] events  P:{sid}:events
-- ARGV[1] now ms (the system clock's: the record's and the session's own times)
-- ARGV[2] '1': the session's state set running (updated_at ARGV[1]); '' not
-- ARGV[3] wake_pending: the notice whose wake command is about to run; '' none
-- ARGV[4..] a wake record's fields and values after kind and at (none: no record)
-- Drops the session's retry_at; returns 1.
redis.call('HDEL', KEYS[1], 'retry_at')
if ARGV[2] == '1' then
  redis.call('HSET', KEYS[1], 'updated_at', ARGV[1], 'state', 'running')
  if ARGV[3] ~= '' then
    redis.call('HSET', KEYS[1], 'wake_pending', ARGV[3])
  end
end
if #ARGV > 3 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', 10000, '*', 'kind', 'wake', 'at', ARGV[1],
    unpack(ARGV, 4))
end
return 1
