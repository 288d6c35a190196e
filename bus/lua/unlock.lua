-- unlock.lua: release a session's delivery lock only if we still hold it.
-- KEYS[1] lock  P:{sid}:lock
-- ARGV[1] our token
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
