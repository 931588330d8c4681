-- v4 on PostgreSQL: a settlement as one statement, so that the writer can send a whole batch of
-- them without waiting for an answer in between (see writer.rs). The same plan as
-- `crate::ledger::Plan`, which SQLite runs in Rust: each capture takes what it can from the hold
-- and the rest from the balance (never below zero; what the balance cannot cover is noted on the
-- row), a step already charged is not charged again (the ledger's unique keys), the release
-- returns what is left of an open hold; then the account and the hold move by what was written.
-- The hold's row is locked first, then the account's, as every other settlement does.
CREATE OR REPLACE FUNCTION interlingua_settle(
    p_task TEXT, p_steps TEXT[], p_amounts BIGINT[], p_release BOOLEAN, p_at TEXT,
    OUT settled_captured BIGINT, OUT settled_released BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    h holds%ROWTYPE;
    v_remaining BIGINT;
    -- The account's available credits, read (and its row locked) when a capture first needs
    -- more than the hold has left.
    v_available BIGINT;
    v_from_holds BIGINT := 0;
    v_beyond BIGINT := 0;
    v_amount BIGINT;
    v_from_hold BIGINT;
    v_charged BIGINT;
    v_written INTEGER;
    v_release BOOLEAN;
BEGIN
    settled_captured := 0;
    settled_released := 0;
    SELECT * INTO h FROM holds WHERE task_id = p_task FOR UPDATE;
    -- Credits belong to the account that held them; a task without a hold is free.
    IF NOT FOUND THEN
        RETURN;
    END IF;
    v_remaining := h.remaining;
    FOR i IN 1 .. COALESCE(array_length(p_steps, 1), 0) LOOP
        v_amount := p_amounts[i];
        v_from_hold := LEAST(v_amount, CASE WHEN h.open THEN v_remaining ELSE 0 END);
        v_charged := v_amount;
        IF v_amount > v_from_hold THEN
            IF v_available IS NULL THEN
                SELECT a.granted - a.captured - a.held INTO v_available
                FROM accounts a WHERE a.plan = h.plan AND a.subject = h.subject FOR UPDATE;
                v_available := COALESCE(v_available, 0);
            END IF;
            v_charged := v_from_hold
                + LEAST(v_amount - v_from_hold, GREATEST(v_available - v_beyond, 0));
        END IF;
        INSERT INTO ledger (at, plan, subject, kind, amount, from_hold, task_id, step_id, note)
        VALUES (p_at, h.plan, h.subject, 'capture', v_charged, v_from_hold, p_task, p_steps[i],
                CASE WHEN v_charged < v_amount
                     THEN (v_amount - v_charged) || ' credits not covered by the balance' END)
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_written = ROW_COUNT;
        IF v_written = 1 THEN
            v_remaining := v_remaining - v_from_hold;
            v_from_holds := v_from_holds + v_from_hold;
            settled_captured := settled_captured + v_charged;
            v_beyond := v_beyond + v_charged - v_from_hold;
        END IF;
    END LOOP;
    v_release := p_release AND h.open;
    IF v_release THEN
        INSERT INTO ledger (at, plan, subject, kind, amount, from_hold, task_id)
        VALUES (p_at, h.plan, h.subject, 'release', v_remaining, 0, p_task)
        ON CONFLICT DO NOTHING;
        GET DIAGNOSTICS v_written = ROW_COUNT;
        IF v_written = 1 THEN
            settled_released := v_remaining;
        END IF;
        v_remaining := 0;
    END IF;
    IF settled_captured <> 0 OR v_from_holds <> 0 OR settled_released <> 0 THEN
        UPDATE accounts SET captured = captured + settled_captured,
                            held = held - (v_from_holds + settled_released)
        WHERE plan = h.plan AND subject = h.subject;
    END IF;
    IF v_remaining <> h.remaining OR v_release THEN
        UPDATE holds SET remaining = v_remaining, open = h.open AND NOT v_release
        WHERE task_id = p_task;
    END IF;
END $$;

-- A task's update and its settlement as one statement: nothing is settled unless the update
-- found the task at `p_version` (`updated` false: a conflict, and nothing was written).
CREATE OR REPLACE FUNCTION interlingua_update_and_settle(
    p_id TEXT, p_version BIGINT, p_status TEXT, p_name TEXT, p_upstream_id TEXT,
    p_terminal BOOLEAN, p_updated_at TEXT, p_doc TEXT, p_conversation TEXT,
    p_steps TEXT[], p_amounts BIGINT[], p_release BOOLEAN, p_at TEXT,
    OUT updated BOOLEAN, OUT settled_captured BIGINT, OUT settled_released BIGINT)
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE tasks SET status = p_status, name = p_name, upstream_id = p_upstream_id,
                     terminal = p_terminal, updated_at = p_updated_at, version = version + 1,
                     doc = p_doc, conversation = p_conversation
    WHERE id = p_id AND version = p_version;
    updated := FOUND;
    settled_captured := 0;
    settled_released := 0;
    IF updated THEN
        SELECT s.settled_captured, s.settled_released INTO settled_captured, settled_released
        FROM interlingua_settle(p_id, p_steps, p_amounts, p_release, p_at) s;
    END IF;
END $$;
