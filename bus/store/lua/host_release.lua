-- host_release.lua: a worker that stops gives its host's claim up, if it still holds it.
-- KEYS[1] claim   P:hostclaim:<host>   (host_claim.lua)
-- ARGV[1] the worker's floor, ARGV[2] its pid
-- Returns 1 when the claim was deleted, else 0 (another floor or another process holds it).
local h = redis.call('HMGET', KEYS[1], 'floor', 'pid')
if h[1] == ARGV[1] and h[2] == ARGV[2] then
  return redis.call('DEL', KEYS[1])
end
return 0
