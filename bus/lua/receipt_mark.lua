-- receipt_mark.lua: messages reached a state; stamp their receipts (first time only).
-- All keys are in the recipient's slot {<sid>}.
-- KEYS[1] session   P:{sid}:session   its last_seen is set when ARGV[4] is '1'
-- KEYS[2] events    P:{sid}:events    a 'receipt' record wakes `inbox receipt --wait-for`
-- KEYS[3..] receipt P:{sid}:rc:<id>   one per message
-- ARGV[1] state ('' = none: only last_seen), ARGV[2] now ms, ARGV[3] TTL ms,
-- ARGV[4] '1' to record that the session's harness was seen now
-- A receipt that does not exist is not created (its message had none, or it aged out);
-- one that moves keeps the TTL from now. Returns how many receipts moved.
local moved = {}
if ARGV[1] ~= '' then
  for i = 3, #KEYS do
    if redis.call('EXISTS', KEYS[i]) == 1 and redis.call('HSETNX', KEYS[i], ARGV[1], ARGV[2]) == 1 then
      redis.call('PEXPIRE', KEYS[i], ARGV[3])
      -- The id is the key's (P:{sid}:rc:<id>); a receipt opened before also holds it.
      table.insert(moved, redis.call('HGET', KEYS[i], 'id') or string.match(KEYS[i], '.*}:rc:(.+)$'))
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
