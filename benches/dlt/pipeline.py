"""The dlt side of benches/dlt/compare: Postgres `contacts` -> Brevo imports.

dlt's `sql_table` source (incremental on `id`) into an `@dlt.destination`
that posts each batch of 1,000 rows as the `POST /contacts/import` syncward
sends in bulk mode (src/destination/brevo/client.rs, `import`): `jsonBody`
rows of `email` + `attributes` {FIRSTNAME, LASTNAME} (nulls left out),
`listIds`, `updateExistingContacts: true`, `emptyContactsAttributes: false`,
`disableNotification: true`, header `api-key`, over one keep-alive session
per loader thread.

    python pipeline.py SOURCE_URL BREVO_BASE_URL PIPELINES_DIR

BREVO_API_KEY, DLT_BACKEND (default "sqlalchemy", dlt's default), LIST_ID
(default 1). Prints one JSON line: rows sent, imports, the seconds
`pipeline.run` took and each step's (extract, normalize, load).
"""

import json
import os
import sys
import threading
import time

T_START = time.monotonic()

import dlt  # noqa: E402
import requests  # noqa: E402
from dlt.sources.sql_database import sql_table  # noqa: E402

SOURCE_URL, BASE_URL, PIPELINES_DIR = sys.argv[1:4]
API_KEY = os.environ["BREVO_API_KEY"]
BACKEND = os.environ.get("DLT_BACKEND", "sqlalchemy")
LIST_IDS = [int(os.environ.get("LIST_ID", "1"))]
IMPORT_URL = BASE_URL.rstrip("/") + "/contacts/import"

_local = threading.local()
_sent = {"rows": 0, "imports": 0}
_sent_lock = threading.Lock()


def session() -> requests.Session:
    """One keep-alive session per loader thread (dlt may load in threads)."""
    s = getattr(_local, "session", None)
    if s is None:
        s = requests.Session()
        s.headers.update({"api-key": API_KEY, "accept": "application/json"})
        _local.session = s
    return s


@dlt.destination(batch_size=1000, name="brevo_import")
def brevo_import(items, table) -> None:
    if hasattr(items, "to_pylist"):
        # DLT_BACKEND=pyarrow: the batch comes as an arrow record batch.
        items = items.to_pylist()
    rows = []
    for item in items:
        attributes = {
            name: item.get(column)
            for name, column in (("FIRSTNAME", "first_name"), ("LASTNAME", "last_name"))
            if item.get(column) is not None
        }
        rows.append({"email": item["email"], "attributes": attributes})
    body = {
        "jsonBody": rows,
        "listIds": LIST_IDS,
        "updateExistingContacts": True,
        "emptyContactsAttributes": False,
        "disableNotification": True,
    }
    response = session().post(IMPORT_URL, json=body, timeout=30)
    if response.status_code != 202:
        # dlt retries or fails the load job on an exception.
        raise RuntimeError(f"import answered {response.status_code}: {response.text[:200]}")
    with _sent_lock:
        _sent["rows"] += len(rows)
        _sent["imports"] += 1


def main() -> None:
    contacts = sql_table(
        credentials=SOURCE_URL,
        table="contacts",
        incremental=dlt.sources.incremental("id"),
        backend=BACKEND,
    )
    pipeline = dlt.pipeline(
        pipeline_name="contacts_to_brevo",
        destination=brevo_import(),
        pipelines_dir=PIPELINES_DIR,
    )
    started = time.monotonic()
    pipeline.run(contacts)
    run_seconds = time.monotonic() - started
    steps = {
        step.step: (step.finished_at - step.started_at).total_seconds()
        for step in pipeline.last_trace.steps
        if step.step in ("extract", "normalize", "load")
    }
    print(
        json.dumps(
            {
                "backend": BACKEND,
                "rows": _sent["rows"],
                "imports": _sent["imports"],
                "run_seconds": run_seconds,
                "steps": steps,
                "startup_seconds": started - T_START,
            }
        )
    )


if __name__ == "__main__":
    main()
