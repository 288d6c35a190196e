-- kick_reclaim.lua: put a dead delivery loop's taken kicks back at the head of its host's
-- list, for the live loops (bus/delivery/kick_list.py), once its beat is older than ARGV[2] ms.
-- All keys are in the host's slot {kick:<host>}.
-- KEYS[1] list    P:{kick:<host>}:list           session ids waiting for a delivery loop
-- KEYS[2] loops   P:{kick:<host>}:loops          loop id -> its last beat (Redis ms)
-- KEYS[3] taken   P:{kick:<host>}:taken:<loop>   what that loop took
-- ARGV[1] the loop's id, ARGV[2] a beat older than this many ms is a dead loop's
-- Returns how many kicks were put back; -1 when the loop is not dead (it beat since).
local beat = redis.call('HGET', KEYS[2], ARGV[1])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if beat and now - tonumber(beat) <= tonumber(ARGV[2]) then
  return -1
end
local taken = redis.call('LRANGE', KEYS[3], 0, -1)
-- Oldest first at the head again: pushed to the left from the newest.
for i = #taken, 1, -1 do
  redis.call('LPUSH', KEYS[1], taken[i])
end
redis.call('DEL', KEYS[3])
redis.call('HDEL', KEYS[2], ARGV[1])
return #taken
