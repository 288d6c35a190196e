-- delivery_snapshot.lua: a delivery's fence and the plan's reads in one call
-- (bus.delivery.engine's snapshot stage). The steps are parts/snapshot.lua's
-- (delivery_begin.lua runs them too).
-- All keys are in the session's slot {<sid>}.
-- KEYS[1] lock      P:{sid}:lock
-- KEYS[2] session   P:{sid}:session
-- KEYS[3] notice    P:{sid}:notice
-- KEYS[4] floor     P:{sid}:floor
-- KEYS[5] new       P:{sid}:new
-- KEYS[6] wakeq     P:{sid}:wakeq
-- KEYS[7] stream    P:{sid}:stream
-- KEYS[8] cursor    P:{sid}:cursor
-- KEYS[9] rawflight P:{sid}:rawflight
-- KEYS[10] again    P:{sid}:again (the hand-off flag: extended with the lease, extend_lock.lua)
-- KEYS[11] events   P:{sid}:events, KEYS[12] msgs P:{sid}:msgs (with ARGV[6] only)
-- ARGV[1] our lock token, ARGV[2] lock TTL ms
-- ARGV[3] advance_to: move the cursor there first (and drop the raw line in flight); '' not
-- ARGV[4] read_after: also read up to ARGV[5] entries after this stream id; '' not
-- ARGV[6] (optional) a notice id: take the notice into flight in this call when the reads
--         show a running session's steer (parts/snapshot.lua's steer_ready), ARGV[7] now
--         ms, ARGV[8] '1' when a session that names no agent_inbox has it on
-- Returns, JSON-encoded (one string: a batch's thousands of nested replies cost the
-- client's parser more than the encoding costs here; an empty list encodes as {}):
-- [held, session hash (flat), notice id or '', floor hash (flat), ZCARD new,
-- first wakeq score or '', first new score or '', notice exists, retry_at or '',
-- queue length after the trim (queue_trim.lua's rule), entries read, the notice taken
-- (notice_take.lua's reply with its msgs key) or ''].
--@include snapshot
local take = nil
if ARGV[6] and ARGV[6] ~= '' then
  take = {ARGV[6], ARGV[7], ARGV[8]}
end
return cjson.encode(snapshot(KEYS, ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], take))
