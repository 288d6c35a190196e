-- receipt_mark.lua: messages reached a state; stamp their receipts (first time only).
-- All keys are in the recipient's slot {<sid>}.
-- KEYS[1] session   P:{sid}:session   its last_seen is set when ARGV[4] is '1'
-- KEYS[2] events    P:{sid}:events    a 'receipt' record wakes `inbox receipt --wait-for`
-- KEYS[3] ids       P:{sid}:ids       '~' .. id -> a stored message's receipt (JSON)
-- KEYS[3 + i] receipt P:{sid}:rc:<id_i>  the receipt hash of a bounced message
-- ARGV[1] state ('' = none: only last_seen), ARGV[2] now ms, ARGV[3] TTL ms,
-- ARGV[4] '1' to record that the session's harness was seen now, ARGV[4 + i] id_i
-- A receipt that does not exist is not created (its message had none, or it aged out);
-- a hash that moves keeps the TTL from now (one in ids lives while the prune keeps it:
-- bus.store.inbox). Returns how many receipts moved.
local moved = {}
if ARGV[1] ~= '' then
  local at = tonumber(ARGV[2])
  for i = 5, #ARGV do
    local id, key = ARGV[i], KEYS[i - 1]
    local raw = redis.call('HGET', KEYS[3], '~' .. id)
    if raw then
      local rc = cjson.decode(raw)
      if rc[ARGV[1]] == nil then
        rc[ARGV[1]] = at
        redis.call('HSET', KEYS[3], '~' .. id, cjson.encode(rc))
        table.insert(moved, id)
      end
    elseif redis.call('EXISTS', key) == 1 and redis.call('HSETNX', key, ARGV[1], ARGV[2]) == 1 then
      redis.call('PEXPIRE', key, ARGV[3])
      table.insert(moved, id)
    end
  end
end
if ARGV[4] == '1' and redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'last_seen', ARGV[2])
end
if #moved > 0 then
  redis.call('XADD', KEYS[2], 'MAXLEN', '~', 10000, '*', 'kind', 'receipt', 'state', ARGV[1],
    'ids', cjson.encode(moved), 'at', ARGV[2])
end
return #moved
