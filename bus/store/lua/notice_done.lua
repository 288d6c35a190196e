-- notice_done.lua: the notice in flight was written to the floor file; it waits there for
-- a drain, recorded in the floor hash until a drain confirms it (floor_drained.lua) or
-- the sweep finds it taken off and never confirmed (floor_sweep.lua).
-- KEYS[1] notice P:{sid}:notice, KEYS[2] msgs, KEYS[3] carried, KEYS[4] floor, KEYS[5] events
-- ARGV[1] notice id, ARGV[2] now ms, ARGV[3] "file"
-- Returns the ids of the notice, or false when it is not the one in flight (a drain that
-- took the line off the floor first has already confirmed it). The steps:
-- parts/notice_done.lua.
--@include notice_done
return notice_done(KEYS, ARGV[1], ARGV[2], ARGV[3])
