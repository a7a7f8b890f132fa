-- syncward's store. Every table the guarantees stand on; later migrations add,
-- never rewrite. Times are timestamptz (UTC in, UTC out).

-- A tenant. Created by the first `sync apply` that names it.
CREATE TABLE workspaces (
    id          text PRIMARY KEY CHECK (id ~ '^[a-z0-9_-]{1,64}$'),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- One published sync definition and its operational state.
CREATE TABLE syncs (
    id            text PRIMARY KEY CHECK (id ~ '^[a-z0-9_-]{1,64}$'),
    workspace_id  text NOT NULL REFERENCES workspaces (id),
    -- The validated definition as JSON (secrets appear only as env var names).
    definition    jsonb NOT NULL,
    -- Bumped by every publish that changes the definition.
    version       integer NOT NULL DEFAULT 1 CHECK (version >= 1),
    status        text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'paused')),
    -- Why a paused sync is paused: 'manual' or 'circuit_breaker_tripped'.
    paused_reason text,
    paused_at     timestamptz,
    -- The last failure: {run_id, code, what_happened, what_next, owner, detail, at}.
    last_error    jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    -- Last publish, edit or resume: the breaker counts only runs finished after it.
    changed_at    timestamptz NOT NULL DEFAULT now(),
    -- When the sync last became active: the dead-man check leaves younger ones alone.
    activated_at  timestamptz DEFAULT now(),
    CHECK ((status = 'paused') = (paused_reason IS NOT NULL))
);
CREATE INDEX syncs_by_workspace ON syncs (workspace_id);
CREATE INDEX syncs_active ON syncs (workspace_id, activated_at) WHERE status = 'active';

-- The run queue and run history: one row per run, re-queued across attempts.
CREATE TABLE runs (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sync_id          text NOT NULL REFERENCES syncs (id),
    workspace_id     text NOT NULL REFERENCES workspaces (id),
    -- Definition version the run was enqueued for.
    sync_version     integer NOT NULL,
    status           text NOT NULL DEFAULT 'queued'
                     CHECK (status IN ('queued', 'running', 'succeeded', 'failed', 'skipped')),
    -- What put it in the queue: schedule, manual, retry, sweeper, recovery, shutdown, foreground.
    trigger          text NOT NULL,
    -- Attempts spent so far; incremented (and committed) by the claim, before any work.
    attempt          integer NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    max_attempts     integer NOT NULL CHECK (max_attempts >= 1),
    created_at       timestamptz NOT NULL DEFAULT now(),
    -- Not claimed before this (backoff).
    scheduled_at     timestamptz NOT NULL DEFAULT now(),
    started_at       timestamptz,
    finished_at      timestamptz,
    -- Last proof of life (lease renewal).
    heartbeat_at     timestamptz,
    -- Who holds it while running: worker name, daemon boot id, lease token, fence.
    worker_id        text,
    boot_id          uuid,
    lease_token      text,
    fence            bigint,
    cursor_start     jsonb,
    cursor_end       jsonb,
    records_read     bigint NOT NULL DEFAULT 0,
    records_written  bigint NOT NULL DEFAULT 0,
    records_replayed bigint NOT NULL DEFAULT 0,
    records_rejected bigint NOT NULL DEFAULT 0,
    -- Keys found `pending` (left by a dead run) and sent again.
    records_resent   bigint NOT NULL DEFAULT 0,
    failure_code     text,
    failure_detail   text,
    CHECK (status NOT IN ('succeeded', 'failed', 'skipped') OR finished_at IS NOT NULL),
    CHECK (status <> 'failed' OR failure_code IS NOT NULL)
);
-- The queue holds at most one queued run per sync: a second enqueue is a no-op.
CREATE UNIQUE INDEX runs_one_queued_per_sync ON runs (sync_id) WHERE status = 'queued';
-- Claims take the oldest due queued run.
CREATE INDEX runs_claimable ON runs (scheduled_at, id) WHERE status = 'queued';
CREATE INDEX runs_running ON runs (started_at) WHERE status = 'running';
CREATE INDEX runs_by_sync ON runs (sync_id, id DESC);
-- The breaker and the dead-man check read finished runs per sync and workspace.
CREATE INDEX runs_finished_by_sync ON runs (sync_id, finished_at DESC)
    WHERE status IN ('succeeded', 'failed');
CREATE INDEX runs_finished_by_workspace ON runs (workspace_id, finished_at DESC)
    WHERE status IN ('succeeded', 'failed');

-- What happened to a run, in order: claims, attempts, failures, re-queues.
CREATE TABLE run_events (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id  bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    at      timestamptz NOT NULL DEFAULT now(),
    kind    text NOT NULL,
    detail  jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX run_events_by_run ON run_events (run_id, id);

-- Each sync's saved position and its fencing counter.
CREATE TABLE sync_cursors (
    sync_id      text PRIMARY KEY REFERENCES syncs (id),
    -- The source position after the last clean batch; NULL = from the start.
    cursor       jsonb,
    -- Fencing tokens: every lease acquisition takes `fence_issued + 1`. Only grows,
    -- in Postgres, so a Redis restart cannot reset it. A checkpoint is refused
    -- unless it carries the newest issued fence.
    fence_issued bigint NOT NULL DEFAULT 0,
    -- Fence of the run that wrote `cursor`.
    fence        bigint NOT NULL DEFAULT 0,
    run_id       bigint REFERENCES runs (id),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    CHECK (fence <= fence_issued)
);

-- The delivery ledger: one row per delivery key (sha256, 32 bytes, no clear data).
CREATE TABLE deliveries (
    sync_id      text NOT NULL,
    key          bytea NOT NULL CHECK (octet_length(key) = 32),
    status       text NOT NULL CHECK (status IN ('pending', 'completed')),
    -- Sends spent on this key; each claim increments it before the destination call.
    attempts     integer NOT NULL DEFAULT 1 CHECK (attempts >= 0),
    -- The destination's answer, replayed instead of a second call.
    result       jsonb,
    run_id       bigint,
    fence        bigint NOT NULL,
    claimed_at   timestamptz NOT NULL DEFAULT now(),
    completed_at timestamptz,
    PRIMARY KEY (sync_id, key),
    CHECK ((status = 'completed') = (completed_at IS NOT NULL))
);
-- Retention purges walk completed keys oldest first.
CREATE INDEX deliveries_completed_at ON deliveries (completed_at) WHERE status = 'completed';

-- Records the destination refused for good (or past their attempt budget), per run.
CREATE TABLE rejected_records (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      bigint NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
    sync_id     text NOT NULL,
    key         bytea CHECK (key IS NULL OR octet_length(key) = 32),
    -- The mapped e-mail address, the only record value kept.
    email       text,
    code        text NOT NULL,
    message     text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX rejected_records_by_run ON rejected_records (run_id, id);

-- Who changed what, and why: publishes, pauses (by a person or the breaker),
-- resumes, cursor resets.
CREATE TABLE audit_log (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at            timestamptz NOT NULL DEFAULT now(),
    -- cli, api, breaker, daemon
    actor         text NOT NULL,
    action        text NOT NULL,
    workspace_id  text,
    sync_id       text,
    reason        text,
    detail        jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_by_sync ON audit_log (sync_id, id DESC);

-- Every alert raised, with the outcome of each channel it went to.
CREATE TABLE alerts (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at            timestamptz NOT NULL DEFAULT now(),
    kind          text NOT NULL,
    severity      text NOT NULL CHECK (severity IN ('critical', 'warning', 'info')),
    workspace_id  text,
    sync_id       text,
    run_id        bigint,
    message       text NOT NULL,
    failure_code  text,
    owner         text CHECK (owner IS NULL OR owner IN ('customer', 'operator')),
    -- {"log": "sent", "sentry": "sent", "webhook": "failed: …", "email": "not configured"}
    channels      jsonb NOT NULL DEFAULT '{}'
);
CREATE INDEX alerts_by_sync ON alerts (sync_id, id DESC);
CREATE INDEX alerts_by_workspace ON alerts (workspace_id, id DESC);

-- Dead-man incidents: one open row per silent workspace or sync until a success.
CREATE TABLE deadman_incidents (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope         text NOT NULL CHECK (scope IN ('workspace', 'sync')),
    workspace_id  text NOT NULL,
    -- Set when scope = 'sync'.
    sync_id       text,
    -- 'runs_without_success' or 'no_runs'
    silence       text NOT NULL,
    runs_seen     bigint NOT NULL DEFAULT 0,
    opened_at     timestamptz NOT NULL DEFAULT now(),
    closed_at     timestamptz,
    CHECK ((scope = 'sync') = (sync_id IS NOT NULL))
);
CREATE UNIQUE INDEX deadman_one_open_per_target
    ON deadman_incidents (scope, workspace_id, coalesce(sync_id, '')) WHERE closed_at IS NULL;
