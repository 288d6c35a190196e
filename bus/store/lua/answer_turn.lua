-- answer_turn.lua: a turn ended; every message it carried gets its answer.
-- KEYS[1] carried P:{sid}:carried, KEYS[2] msgs, KEYS[3] ids, KEYS[4] waiters, KEYS[5] events
-- ARGV[1] answer text, ARGV[2] now ms, ARGV[3] "1" if there is an answer
-- Returns the ids whose senders wait for the answer.
local ids = redis.call('SMEMBERS', KEYS[1])
local waiting = {}
for _, id in ipairs(ids) do
  local raw = redis.call('HGET', KEYS[2], id)
  if raw then
    local rec = cjson.decode(raw)
    if rec.mark ~= 'retracted' and rec.mark ~= 'removed' then
      rec.mark = 'answered'
      rec.answered_at = tonumber(ARGV[2])
      redis.call('HSET', KEYS[2], id, cjson.encode(rec))
    end
  end
  local ans_raw = redis.call('HGET', KEYS[3], id)
  if ans_raw then
    local ans = cjson.decode(ans_raw)
    if ans.state ~= 'withdrawn' and ans.state ~= 'retracted' then
      ans.state = 'answered'
      if ARGV[3] == '1' then ans.answer = ARGV[1] end
      redis.call('HSET', KEYS[3], id, cjson.encode(ans))
    end
  end
  if redis.call('SREM', KEYS[4], id) == 1 then table.insert(waiting, id) end
end
redis.call('DEL', KEYS[1])
if #ids > 0 then
  redis.call('XADD', KEYS[5], 'MAXLEN', '~', 10000, '*', 'kind', 'inbox_answered',
    'ids', cjson.encode(ids), 'at', ARGV[2])
end
return waiting
