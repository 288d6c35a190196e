-- ids_indexed.lua: which of a batch's message ids the recipient index holds, and the
-- session each was appended to (bus/store/receipt_index.py), in one call: the replies
-- carry only the ids found, not one nil per id and day.
-- KEYS[i]  P:{rc:<b>}:rcpt:<day>  hash: message id -> session (one bucket of one day);
--          the keys of one bucket come newest day first
-- ARGV[i]  the ids to look up in KEYS[i], each ended by a newline
-- Returns a flat array: id, session, id, session, ... (an id at most once: the first key
-- in KEYS order that holds it).
local found, out = {}, {}
local step = 500
for i, key in ipairs(KEYS) do
  if redis.call('EXISTS', key) == 1 then
    local ids = {}
    for id in string.gmatch(ARGV[i], '([^\n]*)\n') do
      if not found[id] then
        ids[#ids + 1] = id
      end
    end
    for at = 1, #ids, step do
      local last = math.min(#ids, at + step - 1)
      local got = redis.call('HMGET', key, unpack(ids, at, last))
      for j = at, last do
        local sid = got[j - at + 1]
        if sid then
          found[ids[j]] = true
          out[#out + 1] = ids[j]
          out[#out + 1] = sid
        end
      end
    end
  end
end
return out
