-- Every syncward process that can hold a lease (a daemon, a foreground run):
-- who it is, and when it last showed signs of life. Postgres' own judge of
-- which runs are alive (guarantee 3), beside the Redis liveness keys, which a
-- Redis restart loses: a run does not start while another run of its sync is
-- `running` under a process whose heartbeat is fresher than its own
-- liveness TTL. Also what `syncward status` lists.
CREATE TABLE processes (
    boot_id         uuid PRIMARY KEY,
    kind            text NOT NULL CHECK (kind IN ('daemon', 'foreground')),
    host            text NOT NULL,
    pid             integer NOT NULL,
    version         text NOT NULL,
    started_at      timestamptz NOT NULL DEFAULT now(),
    heartbeat_at    timestamptz NOT NULL DEFAULT now(),
    -- How long a heartbeat counts: the process's `workers.liveness_ttl`.
    liveness_ttl_ms bigint NOT NULL CHECK (liveness_ttl_ms > 0)
);

-- The judge's probe: the running runs of one sync.
CREATE INDEX runs_running_by_sync ON runs (sync_id) WHERE status = 'running';
