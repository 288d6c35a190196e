-- decide.lua: apply one decision to a typed request thread, compare-and-set.
-- Python computed the outcome with bus/core/decisions.py from the state it read; this script
-- writes it only if the thread is still in that state, so two parties deciding at once
-- cannot both win. All keys are in the thread's slot {<thr>}.
-- KEYS[1] meta  P:{thr}:meta  hash: state, offered_by, windows, count, newest_at, ...;
--                             one_m: a one-message thread's message as kept (its id
--                             is one_m's)
-- KEYS[2] log   P:{thr}:log   stream of the thread's messages (fields id, m = JSON)
-- KEYS[3] seen  P:{thr}:seen  ids already in the log (the notice of the decision reuses
--                             the envelope id, so its delivery does not log it twice)
-- ARGV[1] expected state, ARGV[2] expected offered_by ('' = none)
-- ARGV[3] new state, ARGV[4] new offered_by ('' = clear it)
-- ARGV[5] windows JSON to store ('' = leave the stored windows as they are)
-- ARGV[6] envelope id, ARGV[7] envelope JSON, ARGV[8] at ms, ARGV[9] sender label,
-- ARGV[10] preview, ARGV[11] log MAXLEN
-- Returns {'ok', new state} | {'conflict', state, offered_by} | {'missing', ''}
local state = redis.call('HGET', KEYS[1], 'state')
if not state then return {'missing', ''} end
local offered_by = redis.call('HGET', KEYS[1], 'offered_by') or ''
if state ~= ARGV[1] or offered_by ~= ARGV[2] then
  return {'conflict', state, offered_by}
end
redis.call('HSET', KEYS[1], 'state', ARGV[3])
if ARGV[4] == '' then
  redis.call('HDEL', KEYS[1], 'offered_by')
else
  redis.call('HSET', KEYS[1], 'offered_by', ARGV[4])
end
if ARGV[5] ~= '' then
  redis.call('HSET', KEYS[1], 'windows', ARGV[5])
end
-- A one-message thread keeps its message in meta (thread_append.lua): to the log first.
local one_m = redis.call('HGET', KEYS[1], 'one_m')
if one_m and redis.call('EXISTS', KEYS[2]) == 0 then
  local one_id = cjson.decode(one_m).id
  redis.call('XADD', KEYS[2], '*', 'id', one_id, 'm', one_m)
  redis.call('SADD', KEYS[3], one_id)
end
redis.call('HDEL', KEYS[1], 'one_m')
redis.call('SADD', KEYS[3], ARGV[6])
redis.call('XADD', KEYS[2], 'MAXLEN', '~', tonumber(ARGV[11]), '*', 'id', ARGV[6], 'm', ARGV[7])
local senders = cjson.decode(redis.call('HGET', KEYS[1], 'senders') or '[]')
local known = false
for _, s in ipairs(senders) do if s == ARGV[9] then known = true end end
if not known then
  table.insert(senders, ARGV[9])
  redis.call('HSET', KEYS[1], 'senders', cjson.encode(senders))
end
redis.call('HINCRBY', KEYS[1], 'count', 1)
redis.call('HSET', KEYS[1], 'newest_at', ARGV[8], 'newest_preview', ARGV[10])
return {'ok', ARGV[3]}
