use super::*;

// Lines as the agents write them (shortened from real transcripts).
const CLAUDE: &str = r#"{"type":"system","subtype":"init","cwd":"/c","session_id":"s","tools":["Bash"],"model":"claude-opus-5-5"}
{"type":"assistant","message":{"content":[{"type":"text","text":"Looking."},{"id":"t0","input":{"command":"echo ok > permitted.txt","description":"d"},"name":"Bash","type":"tool_use"}],"role":"assistant"}}
{"type":"user","message":{"role":"user","content":[{"tool_use_id":"t0","type":"tool_result","content":"ok\n1\n2\n3\n4\n5\n6\n7","is_error":false}]}}
{"type":"user","message":{"role":"user","content":[{"tool_use_id":"t1","type":"tool_result","content":[{"type":"text","text":"denied"}],"is_error":true}]}}
{"type":"system","subtype":"task_notification","task_id":"x"}
{"type":"result","subtype":"success","is_error":false,"num_turns":3,"result":"All done."}
"#;

const OPENCODE: &str = r#"{"type":"step_start","timestamp":1,"sessionID":"ses_1","part":{"type":"step-start"}}
{"type":"text","timestamp":2,"sessionID":"ses_1","part":{"type":"text","text":"I will list."}}
{"type":"tool_use","timestamp":3,"sessionID":"ses_1","part":{"tool":"bash","callID":"c","state":{"status":"completed","input":{"command":"ls"},"output":"a\nb\n"}}}
{"type":"tool_use","timestamp":4,"sessionID":"ses_1","part":{"tool":"read","callID":"d","state":{"status":"error","input":{"filePath":"/root/x"},"error":"refused by the runner"}}}
{"type":"step_finish","timestamp":5,"sessionID":"ses_1","part":{"reason":"tool-calls"}}
{"type":"step_finish","timestamp":6,"sessionID":"ses_1","part":{"reason":"stop"}}
{"type":"error","timestamp":7,"sessionID":"ses_1","error":{"name":"APIError","data":{"message":"502 from the gateway"}}}
"#;

fn all(stream: &str) -> Vec<Activity> {
    stream.lines().flat_map(render).collect()
}

#[test]
fn claude_code_stream_reads_as_text_tools_and_end() {
    let got = all(CLAUDE);
    assert_eq!(
        got[..3],
        [
            Activity::Started {
                model: "claude-opus-5-5".into()
            },
            Activity::Text {
                text: "Looking.".into()
            },
            Activity::Tool {
                name: "Bash".into(),
                input: "echo ok > permitted.txt".into()
            },
        ]
    );
    assert_eq!(
        got[3],
        Activity::Output {
            text: "ok\n1\n2\n3\n4\n5\n… 2 more lines".into(),
            error: false
        }
    );
    assert_eq!(
        got[4],
        Activity::Output {
            text: "denied".into(),
            error: true
        }
    );
    assert_eq!(
        got[5],
        Activity::End {
            text: "done after 3 turns: All done.".into()
        }
    );
    assert_eq!(got.len(), 6, "a task notification is no activity: {got:?}");
}

#[test]
fn opencode_stream_reads_the_same_way() {
    let got = all(OPENCODE);
    assert_eq!(
        got,
        [
            Activity::Text {
                text: "I will list.".into()
            },
            Activity::Tool {
                name: "bash".into(),
                input: "ls".into()
            },
            Activity::Output {
                text: "a\nb".into(),
                error: false
            },
            Activity::Tool {
                name: "read".into(),
                input: "/root/x".into()
            },
            Activity::Output {
                text: "refused by the runner".into(),
                error: true
            },
            Activity::End {
                text: "the model stopped".into()
            },
            Activity::Error {
                text: "APIError: 502 from the gateway".into()
            },
        ]
    );
}

#[test]
fn the_agents_text_cannot_steer_the_terminal() {
    let line = r#"{"type":"text","part":{"text":"hi \u001b]0;owned\u0007\u001b[2J there"}}"#;
    let got = render(line);
    assert_eq!(
        got[0].human(),
        "text   hi \\u{1b}]0;owned\\u{7}\\u{1b}[2J there\n"
    );
    assert_eq!(
        render("not json \u{1b}[31m")[0].human(),
        "?      not json \\u{1b}[31m\n"
    );
}

/// Bidi controls, zero-width characters, C1 controls and DEL are shown escaped in both forms:
/// a command shown is the command that ran (issue 40).
#[test]
fn reordering_and_hidden_characters_are_escaped_in_both_forms() {
    let command = "echo \u{202e}gnp.exe\u{2067} \u{200b}rm\u{feff} \u{9d}8;;x\u{9c}\u{7f}";
    let line = serde_json::json!({"type": "tool_use", "part": {"tool": "bash",
        "state": {"status": "completed", "input": {"command": command}, "output": "ok"}}});
    for format in [Format::Human, Format::Json] {
        let mut out = Renderer::new(Vec::new(), format);
        writeln!(out, "{line}").unwrap();
        let text = String::from_utf8(out.out).unwrap();
        assert!(
            !text.chars().any(crate::util::text::is_unsafe),
            "{format:?}: {text:?}"
        );
        if format == Format::Json {
            let first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
            assert_eq!(first["input"], command, "JSON keeps the text");
            assert!(text.contains("\\u202e"), "{text}");
        } else {
            assert!(
                text.contains("\\u{202e}") && text.contains("\\u{9d}"),
                "{text}"
            );
        }
    }
}

#[test]
fn the_renderer_waits_for_a_cut_line_and_prints_both_formats() {
    let mut human = Renderer::new(Vec::new(), Format::Human);
    let (a, b) = OPENCODE.split_at(120);
    human.write_all(a.as_bytes()).unwrap();
    human.write_all(b.as_bytes()).unwrap();
    let text = String::from_utf8(human.out).unwrap();
    assert!(
        text.starts_with("text   I will list.\ntool   bash: ls\n       a\n       b\n"),
        "{text}"
    );
    assert!(text.contains("error  refused by the runner\n"), "{text}");

    let mut json = Renderer::new(Vec::new(), Format::Json);
    json.write_all(CLAUDE.as_bytes()).unwrap();
    let text = String::from_utf8(json.out).unwrap();
    let first: Value = serde_json::from_str(text.lines().nth(2).unwrap()).unwrap();
    assert_eq!(
        first,
        serde_json::json!({"kind": "tool", "name": "Bash", "input": "echo ok > permitted.txt"})
    );
}
