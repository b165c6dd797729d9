use super::*;

#[test]
fn paths_of_nested_keys_and_array_items() {
    let text = "{\"a\": {\"b\": [1, {\"c\": \"x\"}]}, \"d\": 2}";
    let at = |needle: &str| {
        let offset = text.find(needle).unwrap() + needle.len();
        path_at(text, 1, offset)
    };
    assert_eq!(at("\"x\"").as_deref(), Some("a.b.1.c"));
    assert_eq!(at("[1").as_deref(), Some("a.b.0"));
    assert_eq!(at("\"d\": 2").as_deref(), Some("d"));
    assert_eq!(path_at(text, 1, 1), None);
}

#[test]
fn escaped_quotes_and_lines_are_counted() {
    let text = "{\n  \"k\\\"ey\": {\n    \"inner\": true\n  }\n}";
    assert_eq!(path_at(text, 3, 17).as_deref(), Some("k\"ey.inner"));
}

#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
struct Outer {
    name: String,
    inner: Inner,
}

#[derive(Debug, serde::Deserialize)]
#[allow(dead_code)]
#[serde(deny_unknown_fields)]
struct Inner {
    budget: u64,
    other: bool,
}

#[test]
fn serde_errors_are_located_in_their_field() {
    let text = "{\"name\": \"n\", \"inner\": {\"budget\": \"20M\", \"other\": true}}";
    let e = serde_json::from_str::<Outer>(text).unwrap_err();
    let (path, message) = locate(text, &e);
    assert_eq!(path.as_deref(), Some("inner.budget"));
    assert_eq!(message, "invalid type: string \"20M\", expected u64");
    let text = "{\"name\": \"n\", \"inner\": {\"budget\": 1, \"colour\": 1}}";
    let e = serde_json::from_str::<Outer>(text).unwrap_err();
    assert_eq!(locate(text, &e).0.as_deref(), Some("inner.colour"));
    let text = "{\"name\": ";
    let e = serde_json::from_str::<Outer>(text).unwrap_err();
    assert_eq!(locate(text, &e).0, None, "a syntax error is no field's");
}
