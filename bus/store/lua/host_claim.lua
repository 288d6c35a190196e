-- host_claim.lua: a worker claims (or renews its claim on) serving its host.
-- One host, one floor: the claim names the floor (machine and INBOX_HOME) it delivers to;
-- a worker of another floor is refused while the claim lives.
-- KEYS[1] claim   P:hostclaim:<host>   hash: floor, pid, since, beat (Redis ms); PX TTL
-- ARGV[1] the worker's floor ("<machine>\t<home>"), ARGV[2] its pid, ARGV[3] the TTL ms
-- Returns {1} when claimed or renewed, else {0, floor, pid, since} of the holder.
local held = redis.call('HGET', KEYS[1], 'floor')
if held and held ~= ARGV[1] then
  local h = redis.call('HMGET', KEYS[1], 'pid', 'since')
  return {0, held, h[1] or '', h[2] or ''}
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not held then
  redis.call('HSET', KEYS[1], 'since', now)
end
redis.call('HSET', KEYS[1], 'floor', ARGV[1], 'pid', ARGV[2], 'beat', now)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return {1}
