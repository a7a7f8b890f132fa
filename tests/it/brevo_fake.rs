//! The Brevo fake speaks Brevo's protocol as the specs describe it: checked
//! here so the other tests can trust it.

use serde_json::json;

use crate::fakes::brevo::{BrevoFake, Fault};
use crate::helpers::install_crypto;

async fn post(
    fake: &BrevoFake,
    path: &str,
    key: Option<&str>,
    body: serde_json::Value,
) -> anyhow::Result<(u16, serde_json::Value)> {
    install_crypto();
    let mut request = reqwest::Client::new()
        .post(format!("{}{path}", fake.base_url))
        .json(&body);
    if let Some(key) = key {
        request = request.header("api-key", key);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    let text = response.text().await?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    ))
}

/// `GET /processes/{id}` with the fake's key.
async fn process_of(fake: &BrevoFake, id: i64) -> anyhow::Result<serde_json::Value> {
    Ok(reqwest::Client::new()
        .get(format!("{}/processes/{id}", fake.base_url))
        .header("api-key", "k")
        .send()
        .await?
        .json()
        .await?)
}

#[tokio::test]
async fn auth_errors_carry_brevos_bodies() -> anyhow::Result<()> {
    let fake = BrevoFake::start("right").await?;
    let (status, body) = post(&fake, "/contacts", None, json!({"email": "a@b.c"})).await?;
    assert_eq!(
        (status, body),
        (
            401,
            json!({"code": "unauthorized", "message": "authentication not found in headers"})
        )
    );
    let (status, body) = post(&fake, "/contacts", Some("wrong"), json!({"email": "a@b.c"})).await?;
    assert_eq!(
        (status, body),
        (
            401,
            json!({"code": "unauthorized", "message": "Key not found"})
        )
    );
    let recorded = fake.requests();
    assert_eq!(recorded[1].api_key.as_deref(), Some("wrong"));
    assert_eq!(recorded[1].method, "POST");
    Ok(())
}

#[tokio::test]
async fn contacts_are_upserted_only_with_update_enabled() -> anyhow::Result<()> {
    let fake = BrevoFake::start("k").await?;
    let (status, body) = post(
        &fake,
        "/contacts",
        Some("k"),
        json!({"email": "Ann@x.io", "attributes": {"FNAME": "Ann"}, "listIds": [3]}),
    )
    .await?;
    assert_eq!(status, 201);
    assert_eq!(body, json!({"id": 1}));
    let (status, body) = post(&fake, "/contacts", Some("k"), json!({"email": "ann@x.io"})).await?;
    assert_eq!(status, 400);
    assert_eq!(body["code"], "duplicate_parameter");
    let (status, _) = post(
        &fake,
        "/contacts",
        Some("k"),
        json!({"email": "ann@x.io", "attributes": {"LNAME": "Lee"}, "updateEnabled": true}),
    )
    .await?;
    assert_eq!(status, 204);
    let contact = &fake.contacts()["ann@x.io"];
    assert_eq!(contact.attributes["FNAME"], "Ann");
    assert_eq!(contact.attributes["LNAME"], "Lee");
    assert_eq!(contact.list_ids, [3]);
    let (status, body) = post(&fake, "/contacts", Some("k"), json!({"attributes": {}})).await?;
    assert_eq!(
        (status, body["code"].clone()),
        (400, json!("missing_parameter"))
    );
    let (status, _) = post(
        &fake,
        "/contacts",
        Some("k"),
        json!({"email": "b@x.io", "attributes": {"BAD": {"nested": 1}}}),
    )
    .await?;
    assert_eq!(
        status, 400,
        "attribute values are numbers, strings, booleans or string arrays"
    );
    let writes = fake.writes();
    assert_eq!(writes.len(), 2);
    assert_eq!((writes[1].via, writes[1].request), ("contacts", 2));
    assert_eq!(writes[1].attributes, json!({"LNAME": "Lee"}));
    Ok(())
}

#[tokio::test]
async fn imports_are_checked_answered_with_a_process_and_the_process_reports_counts()
-> anyhow::Result<()> {
    let fake = BrevoFake::start("k").await?;
    let (status, _) = post(
        &fake,
        "/contacts/import",
        Some("k"),
        json!({"jsonBody": [], "fileUrl": "https://x", "listIds": [1]}),
    )
    .await?;
    assert_eq!(status, 400, "exactly one of jsonBody, fileBody, fileUrl");
    let (status, _) = post(
        &fake,
        "/contacts/import",
        Some("k"),
        json!({"jsonBody": [{"email": "a@b.c"}]}),
    )
    .await?;
    assert_eq!(status, 400, "listIds or newList is required");
    fake.reject_emails(|e| e.starts_with("bad"));
    let rows = json!([{"email": "a@b.c", "attributes": {"N": 1}}, {"email": "bad@b.c"}]);
    let (status, body) = post(
        &fake,
        "/contacts/import",
        Some("k"),
        json!({"jsonBody": rows, "listIds": [7], "updateExistingContacts": true}),
    )
    .await?;
    assert_eq!(status, 202);
    let id = body["processId"].as_i64().expect("processId");
    let process = process_of(&fake, id).await?;
    assert_eq!(process["status"], "completed");
    assert_eq!(process["name"], "IMPORTUSER");
    assert_eq!(process["info"]["import"]["imported"], 1);
    assert_eq!(process["info"]["import"]["invalid_emails"], 1);
    let missing = reqwest::Client::new()
        .get(format!("{}/processes/999", fake.base_url))
        .header("api-key", "k")
        .send()
        .await?;
    assert_eq!(missing.status().as_u16(), 404);

    fake.set_process_status("failed");
    let (_, body) = post(
        &fake,
        "/contacts/import",
        Some("k"),
        json!({"jsonBody": [{"email": "c@d.e"}], "listIds": [7]}),
    )
    .await?;
    let id = body["processId"].as_i64().expect("processId");
    let process = process_of(&fake, id).await?;
    assert_eq!(process["status"], "failed");
    Ok(())
}

/// The stand-alone fake of the benchmarks (`BREVO_FAKE_BACKGROUND_IMPORTS=1`)
/// answers an import before it applies the rows, as Brevo's background
/// process does: the shape is still checked at once, the rows are applied in
/// the order the imports came, and the count waits for them.
#[tokio::test]
async fn background_imports_check_the_shape_at_once_apply_in_order_and_are_counted()
-> anyhow::Result<()> {
    let fake = BrevoFake::start("k").await?;
    fake.background_imports();
    for (body, why) in [
        (
            json!({"jsonBody": [{"email": "a@b.c"}]}),
            "listIds or newList is required",
        ),
        (
            json!({"jsonBody": [], "fileUrl": "https://x", "listIds": [1]}),
            "one source",
        ),
        (
            json!({"jsonBody": [], "listIds": ["x"]}),
            "listIds of integers",
        ),
        (json!(["not", "an", "object"]), "a JSON object"),
    ] {
        let (status, _) = post(&fake, "/contacts/import", Some("k"), body).await?;
        assert_eq!(status, 400, "{why}");
    }
    let mut ids = Vec::new();
    for first_name in ["Ann", "Bea"] {
        let (status, body) = post(
            &fake,
            "/contacts/import",
            Some("k"),
            json!({"jsonBody": [{"email": "A@b.c", "attributes": {"FIRSTNAME": first_name}},
                                {"email": "d@e.f"}],
                   "listIds": [7], "updateExistingContacts": true}),
        )
        .await?;
        assert_eq!(status, 202);
        ids.push(body["processId"].as_i64().expect("processId"));
    }
    let counted: serde_json::Value = reqwest::Client::new()
        .get(format!("http://{}/_fake/contacts", fake.addr))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(counted["count"], 2);
    let contacts = fake.contacts();
    assert_eq!(
        contacts["a@b.c"].attributes["FIRSTNAME"], "Bea",
        "applied in order"
    );
    assert_eq!(contacts["a@b.c"].list_ids, vec![7]);
    for id in ids {
        let process = process_of(&fake, id).await?;
        assert_eq!(process["status"], "completed");
        assert_eq!(
            process["info"]["import"]["imported"].as_i64().unwrap_or(0)
                + process["info"]["import"]["updated"].as_i64().unwrap_or(0),
            2
        );
    }
    Ok(())
}

#[tokio::test]
async fn scripted_faults_come_in_order_and_persistent_ones_until_healed() -> anyhow::Result<()> {
    let fake = BrevoFake::start("k").await?;
    fake.push_faults([Fault::RateLimited { reset_secs: 7 }, Fault::Garbage]);
    install_crypto();
    let limited = reqwest::Client::new()
        .post(format!("{}/contacts", fake.base_url))
        .header("api-key", "k")
        .json(&json!({"email": "a@b.c"}))
        .send()
        .await?;
    assert_eq!(limited.status().as_u16(), 429);
    assert_eq!(limited.headers()["x-sib-ratelimit-reset"], "7");
    let (status, body) = post(&fake, "/contacts", Some("k"), json!({"email": "a@b.c"})).await?;
    assert_eq!(status, 201);
    assert!(body.is_string(), "garbage is not JSON");
    fake.set_fault_always(Some(Fault::ServerError));
    for _ in 0..3 {
        assert_eq!(
            post(&fake, "/contacts", Some("k"), json!({"email": "a@b.c"}))
                .await?
                .0,
            500
        );
    }
    fake.set_fault_always(None);
    assert_eq!(
        post(&fake, "/contacts", Some("k"), json!({"email": "a@b.c"}))
            .await?
            .0,
        201
    );
    Ok(())
}
