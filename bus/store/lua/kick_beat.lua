-- kick_beat.lua: a delivery loop says it is alive: the host's alive key (kick_push.lua
-- pushes only while it is there) and the loop's own beat (kick_reclaim.lua).
-- Both keys are in the host's slot {kick:<host>}.
-- KEYS[1] alive   P:{kick:<host>}:alive   set with a short TTL by every running loop
-- KEYS[2] loops   P:{kick:<host>}:loops   loop id -> its last beat (Redis ms)
-- ARGV[1] the loop's id, ARGV[2] the alive key's TTL ms
-- Returns the beat's time (Redis ms).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('SET', KEYS[1], '1', 'PX', ARGV[2])
redis.call('HSET', KEYS[2], ARGV[1], now)
return now
