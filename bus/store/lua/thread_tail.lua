-- thread_tail.lua: the ids of a thread's messages past a party's reply cursor (a reply
-- marks what its session got in the thread read: bus.delivery.receipts.replied).
-- All keys are in the thread's slot {<thr>}.
-- KEYS[1] meta  P:{thr}:meta  one_m: the only message while there is no log (JSON, its
--                             "id"); field ARGV[1]: the log id up to which the party's
--                             earlier replies marked the thread
-- KEYS[2] log   P:{thr}:log   stream of the thread's messages (field id = message id)
-- ARGV[1] the party's cursor field (bus.store.keys.reply_cursor_field: 'rd:<sid>')
-- Returns {newest log id read ('' when none), message ids past the cursor, oldest first}.
-- Nothing is written: the caller moves the cursor once its marks are stamped, so a mark
-- that failed is tried again by the next reply. Log ids only grow (compaction keeps them),
-- so whatever is appended after the cursor is past it.
if redis.call('EXISTS', KEYS[2]) == 0 then
  local one = redis.call('HGET', KEYS[1], 'one_m')
  if one then
    return {'', cjson.decode(one)['id']}
  end
  return {''}
end
local cursor = redis.call('HGET', KEYS[1], ARGV[1])
local rows = redis.call('XRANGE', KEYS[2], cursor and ('(' .. cursor) or '-', '+')
local out = {#rows > 0 and rows[#rows][1] or ''}
for _, row in ipairs(rows) do
  local f = row[2]
  for i = 1, #f, 2 do
    if f[i] == 'id' then
      table.insert(out, f[i + 1])
      break
    end
  end
end
return out
