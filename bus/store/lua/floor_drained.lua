-- floor_drained.lua: notices confirmed heard (a drain that took them off the floor, or a
-- socket's ack confirmed alone); their messages move new -> noticed (parts/drained.lua).
-- KEYS[1] floor P:{sid}:floor, KEYS[2] msgs, KEYS[3] carried, KEYS[4] events,
-- KEYS[5] notice P:{sid}:notice, KEYS[6] session P:{sid}:session
-- ARGV[1] now ms, ARGV[2] via ("drain" or "socket"), ARGV[3..] notice ids
-- Returns how many notices were marked.
--@include drained
return drained(KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], ARGV[1], ARGV[2],
  {unpack(ARGV, 3)})
