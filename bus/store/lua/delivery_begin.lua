-- delivery_begin.lua: the fixed start of a delivery in one call (bus.delivery.engine).
-- KEYS[1] lock      P:{sid}:lock
-- KEYS[2] pending   P:{sid}:pending
-- KEYS[3] rawflight P:{sid}:rawflight
-- KEYS[4] cursor    P:{sid}:cursor
-- KEYS[5] stream    P:{sid}:stream
-- KEYS[6] session   P:{sid}:session
-- KEYS[7] ids       P:{sid}:ids
-- KEYS[8..17] (optional) the snapshot's keys, as delivery_snapshot.lua's KEYS[1..10]
-- ARGV[1] our lock token, ARGV[2] lock TTL ms, ARGV[3] most entries to read
-- Takes the lock (SET NX PX); when another holds it, returns {0} and touches nothing.
-- Else clears the dispatch flag (a send after this dispatches a fresh delivery), and
-- returns {1, rawflight or '', cursor, read, entries, session hash (flat), send answers}:
-- with a raw line in flight nothing is read (read = 0: the caller recovers it first);
-- else the entries after the cursor (XRANGE, up to ARGV[3]) and, when there are any, the
-- session record and the send answers of their message ids, in entry order (entries
-- and answers JSON-encoded when there are any: [[id, [field, value, ...]], ...] and
-- [answer or '', ...]). With KEYS[8..17] and no entries to read, instead one JSON string:
-- [cursor, the snapshot (parts/snapshot.lua, as delivery_snapshot.lua returns it)], so a
-- due wake, whose messages an arrival already took, starts and plans in one call, not
-- two, and its reply is one string to parse.
--@include snapshot
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return {0}
end
redis.call('DEL', KEYS[2])
local got = redis.call('MGET', KEYS[3], KEYS[4])
local flight = got[1] or ''
local cursor = got[2] or '0-0'
if flight ~= '' then
  return {1, flight, cursor, 0, {}, {}, {}}
end
local rows = redis.call('XRANGE', KEYS[5], '(' .. cursor, '+', 'COUNT', ARGV[3])
if #rows == 0 then
  if #KEYS > 7 then
    return cjson.encode({cursor, snapshot({unpack(KEYS, 8, 17)}, ARGV[1], ARGV[2], '', '', 0)})
  end
  return {1, '', cursor, 1, rows, {}, {}}
end
local ids = {}
for i, row in ipairs(rows) do
  local fields = row[2]
  local id = ''
  for j = 1, #fields, 2 do
    if fields[j] == 'id' then
      id = fields[j + 1]
      break
    end
  end
  ids[i] = id
end
local answers = redis.call('HMGET', KEYS[7], unpack(ids))
for i = 1, #answers do
  if not answers[i] then
    answers[i] = ''
  end
end
-- The entries and their answers as one JSON string each: a batch's thousands of nested
-- replies cost the client's parser more than the encoding costs here.
return {1, '', cursor, 1, cjson.encode(rows), redis.call('HGETALL', KEYS[6]),
  cjson.encode(answers)}
