-- Workspace-scoped access tokens (`syncward token create`): the API and pages
-- show and act on one workspace's syncs only. Only a token's SHA-256 is kept
-- (tokens are 256 random bits, so a plain digest is enough); the token itself
-- is printed once.
CREATE TABLE api_tokens (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    workspace_id  text NOT NULL REFERENCES workspaces (id),
    token_sha256  bytea NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
    read_only     boolean NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz
);
CREATE INDEX api_tokens_by_workspace ON api_tokens (workspace_id, id);
