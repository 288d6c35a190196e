-- extend_lock.lua: keep a session's delivery lock while a long delivery still runs.
-- KEYS[1] lock  P:{sid}:lock
-- ARGV[1] our token, ARGV[2] TTL ms
-- Returns 1 if we still hold it (and it was extended), 0 if we lost it.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
