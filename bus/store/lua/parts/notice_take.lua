-- parts/notice_take.lua: start the one notice in flight for a session, taking every new
-- id (included by notice_take.lua and parts/snapshot.lua). All keys in the session's slot.
-- notice_take(k, nid, now, known), k: notice, new, wakeq, events, msgs (msgs optional), as
-- notice_take.lua's KEYS. known: nil, or what the caller has just read in this script:
-- given, no notice is in flight; known.new, the new set whole (ZRANGE 0 -1 WITHSCORES);
-- known.wake, the wake queue whole; each read here when absent.
-- Returns false when a notice is already in flight or nothing is new; else the ids taken,
-- or with k[5] JSON-encoded [ids, their inbox records (HMGET, in order, false where
-- none)]: the records the notice summarises, in the same round trip (one string for the
-- client to parse, not a nested reply).
local function notice_take(k, nid, now, known)
  if known == nil then
    if redis.call('EXISTS', k[1]) == 1 then
      return false
    end
    known = {}
  end
  local new = known.new or redis.call('ZRANGE', k[2], 0, -1, 'WITHSCORES')
  if #new == 0 then
    return false
  end
  local ids = {}
  for i = 1, #new, 2 do
    ids[#ids + 1] = new[i]
  end
  local wake = known.wake or redis.call('ZRANGE', k[3], 0, -1, 'WITHSCORES')
  redis.call('HSET', k[1], 'id', nid, 'ids', cjson.encode(ids), 'new', cjson.encode(new),
    'wake', cjson.encode(wake), 'at', now)
  redis.call('DEL', k[2], k[3])
  redis.call('XADD', k[4], 'MAXLEN', '~', 10000, '*', 'kind', 'notice_built', 'notice', nid,
    'at', now)
  if k[5] then
    -- In chunks: unpack() of thousands of ids would overflow Lua's stack.
    local records = {}
    for i = 1, #ids, 1000 do
      local part = redis.call('HMGET', k[5], unpack(ids, i, math.min(i + 999, #ids)))
      for j = 1, #part do
        records[#records + 1] = part[j]
      end
    end
    return cjson.encode({ids, records})
  end
  return ids
end
