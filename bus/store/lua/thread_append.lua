-- thread_append.lua: add messages to a thread's log, each once.
-- All keys are in the thread's slot {<thr>}.
-- KEYS[1] meta  P:{thr}:meta  hash: key, label, parties (JSON list), senders (JSON list),
--                             count, newest_at, newest_preview, class; one_m: the
--                             first message while it is the only one, kept without its
--                             usual fields (bus.store.packing.keep_thread_message: its own "md"
--                             lists them; its id is one_m's)
--                             Not written: label when ARGV[5] is ''
--                             (the readers take bus.core.threads.thread_label of key), class
--                             when 'action' (the readers' default), created (unread)
-- KEYS[2] log   P:{thr}:log   stream of the thread's messages (field m = wire JSON)
-- KEYS[3] seen  P:{thr}:seen  ids already in the log
-- ARGV[1] message id, ARGV[2] wire JSON, ARGV[3] at ms, ARGV[4] key, ARGV[5] label ('' = its key's),
-- ARGV[6] parties JSON list (taken only when the thread is made), ARGV[7] sender label, ARGV[8] preview, ARGV[9] class,
-- ARGV[10] log MAXLEN, ARGV[11] the message as a one-message thread keeps it,
-- ARGV[12] '1' when that message's ts is ARGV[3] and its text is ARGV[8]: a one-message
-- thread then keeps no newest_at / newest_preview (the readers,
-- bus.store.packing.meta_of, take them from one_m; the move to the log writes them back)
-- ARGV[13..24], ...: more messages to the thread, twelve arguments each, appended in order
-- (a batch's delivery appends a thread's messages in one call).
-- Returns how many were appended (0 for one already there).
-- A thread's first message stays in meta (field one_m) with no log and no seen
-- set: a stream and a set cost far more than a field, however short. The second
-- message moves it to the log (as kept: bus.store.inbox.thread_log restores it), first,
-- then follows it there.
local function append(A)
  local fresh = false
  -- The meta fields this message sets, in order, written in one HSET at the end (one_m
  -- too: the read below takes key, parties, senders, newest_at and count, not one_m).
  local sets, at = {}, {}
  local function set(field, value)
    if at[field] then
      sets[at[field] + 1] = value
    else
      at[field] = #sets + 1
      sets[#sets + 1] = field
      sets[#sets + 1] = value
    end
  end
  local has_log = redis.call('EXISTS', KEYS[2]) == 1
  if not has_log then
    local one_m = redis.call('HGET', KEYS[1], 'one_m')
    local one_id = one_m and cjson.decode(one_m).id
    if not one_m then
      set('one_m', A[11])
      fresh = true
    elseif one_id == A[1] then
      return 0
    else
      -- newest_* left to one_m (ARGV[12]): written back before one_m goes.
      if redis.call('HEXISTS', KEYS[1], 'newest_at') == 0 then
        local m = cjson.decode(one_m)
        if type(m.ts) == 'number' and type(m.text) == 'string' then
          redis.call('HSET', KEYS[1], 'newest_at', string.format('%.0f', m.ts),
            'newest_preview', m.text)
        end
      end
      redis.call('XADD', KEYS[2], '*', 'id', one_id, 'm', one_m)
      redis.call('SADD', KEYS[3], one_id)
      redis.call('HDEL', KEYS[1], 'one_m')
      has_log = true
    end
  end
  if has_log then
    if redis.call('SADD', KEYS[3], A[1]) == 0 then
      return 0
    end
    redis.call('XADD', KEYS[2], 'MAXLEN', '~', tonumber(A[10]), '*', 'id', A[1], 'm', A[2])
  end
  -- The fields the rest reads, in one call (after the writes above: newest_at may be new).
  local meta = redis.call('HMGET', KEYS[1], 'key', 'parties', 'senders', 'newest_at', 'count')
  local created = not meta[1]
  if created then
    meta[2], meta[3] = '[]', '[]'
    set('key', A[4])
    set('parties', '[]')
    set('senders', '[]')
    if A[5] ~= '' then
      set('label', A[5])
    end
  end
  local function add_all(field, current, values)
    local list = cjson.decode(current or '[]')
    local seen = {}
    local added = false
    for _, v in ipairs(list) do seen[v] = true end
    for _, v in ipairs(values) do
      if v ~= '' and not seen[v] then
        table.insert(list, v)
        seen[v] = true
        added = true
      end
    end
    if added then  -- a sender already listed (the usual case) writes nothing
      set(field, cjson.encode(list))
    end
  end
  -- Parties are fixed when the thread is made (or by the request that made it): a later
  -- message never adds its sender, so naming or computing a thread id is no invitation.
  if created or meta[2] == '[]' then
    add_all('parties', meta[2], cjson.decode(A[6]))
  end
  if A[7] ~= '' then add_all('senders', meta[3], {A[7]}) end
  -- The count read with the rest and written with the rest; one that is not a whole
  -- number fails the script as HINCRBY would (HINCRBY itself raises it).
  local count = tonumber(meta[5] or '0')
  if not count or count ~= math.floor(count) then
    redis.call('HINCRBY', KEYS[1], 'count', 1)
  end
  set('count', string.format('%d', count + 1))
  local had = meta[4]
  local newest = tonumber(had or '0')
  local unclass = false
  if tonumber(A[3]) >= newest then
    if not (fresh and A[12] == '1' and not had) then
      set('newest_at', A[3])
      set('newest_preview', A[8])
    end
    if A[9] == 'action' then
      -- A meta made by this call has no class to drop.
      unclass = not created
    else
      set('class', A[9])
    end
  end
  redis.call('HSET', KEYS[1], unpack(sets))
  if unclass then
    redis.call('HDEL', KEYS[1], 'class')
  end
  return 1
end
local appended = 0
for i = 0, #ARGV - 1, 12 do
  appended = appended + append({unpack(ARGV, i + 1, i + 12)})
end
return appended
