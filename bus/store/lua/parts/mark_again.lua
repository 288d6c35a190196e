-- parts/mark_again.lua: mark an inbox record as carried by a notice that may have been
-- heard and then given back (included by notice_revert.lua and floor_sweep.lua).
-- mark_again(msgs, id): the record gains "again":1 in front, every other byte as it was (a
-- field the record keeps: bus.store.packing.restore_record); the next notice that carries
-- it lists it in ``redelivered`` (bus.delivery.notice.notice_line).
local function mark_again(msgs, id)
  local raw = redis.call('HGET', msgs, id)
  if not raw or string.sub(raw, 1, 1) ~= '{' or raw == '{}' then
    return
  end
  if string.sub(raw, 1, 11) == '{"again":1,' then
    return
  end
  redis.call('HSET', msgs, id, '{"again":1,' .. string.sub(raw, 2))
end
