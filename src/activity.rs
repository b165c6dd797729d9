//! A job's activity as a person reads it: the agent's event stream (`transcript.jsonl`,
//! Claude Code's `stream-json` or opencode's `run --format json`) rendered line by line as the
//! model's text, each tool call with a bounded part of its output, and the end. `logs` prints
//! this by default and follows it as the job runs; `--json` gives the same events as JSON
//! lines for machines, and `--transcript` the raw stream.
//!
//! The stream is the agent's, which the job steers: nothing of it reaches a terminal
//! unescaped (control characters, and with them escape sequences, bidi controls and
//! zero-width characters are shown as `\u{…}` in the human form and as JSON escapes in the
//! JSON one: `crate::util::text`), and a line that is not an event of either agent is shown as
//! it is, clipped, rather than lost.

use std::io::Write;

use serde::Serialize;
use serde_json::Value;

use crate::util::text::clip;

/// One thing the agent did, in the same shape for both agents.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Activity {
    /// The agent's session began (Claude Code's `init`).
    Started { model: String },
    /// The model's text.
    Text { text: String },
    /// A tool call: the tool's name and what it was asked (a command, a path).
    Tool { name: String, input: String },
    /// A tool's answer, bounded.
    Output { text: String, error: bool },
    /// The agent's own end of the session.
    End { text: String },
    /// An error the agent reported.
    Error { text: String },
    /// A line that is no event of either agent.
    Other { text: String },
}

/// The lines of a tool's output shown, and the characters of each.
const OUTPUT_LINES: usize = 6;
const LINE_CHARS: usize = 200;

/// The activities of one line of the stream (none for the events a person does not need:
/// hooks, task notifications, step starts).
pub fn render(line: &str) -> Vec<Activity> {
    let line = line.trim();
    if line.is_empty() {
        return Vec::new();
    }
    let Ok(event) = serde_json::from_str::<Value>(line) else {
        return vec![Activity::Other {
            text: clip(&printable(line), LINE_CHARS),
        }];
    };
    match event["type"].as_str().unwrap_or_default() {
        "system" => claude_system(&event),
        "assistant" => claude_assistant(&event),
        "user" => claude_results(&event),
        "result" => vec![claude_result(&event)],
        "text" => text_of(&event["part"]["text"]),
        "tool_use" => opencode_tool(&event["part"]),
        "step_finish" if event["part"]["reason"] == "stop" => vec![Activity::End {
            text: "the model stopped".into(),
        }],
        "error" => vec![Activity::Error {
            text: opencode_error(&event["error"]),
        }],
        "step_start" | "step_finish" | "stream_event" => Vec::new(),
        other => vec![Activity::Other {
            text: clip(&printable(other), LINE_CHARS),
        }],
    }
}

fn claude_system(event: &Value) -> Vec<Activity> {
    match event["subtype"].as_str() {
        Some("init") => vec![Activity::Started {
            model: printable(event["model"].as_str().unwrap_or("?")),
        }],
        _ => Vec::new(),
    }
}

fn claude_assistant(event: &Value) -> Vec<Activity> {
    let content = event["message"]["content"].as_array();
    content
        .into_iter()
        .flatten()
        .flat_map(|part| match part["type"].as_str() {
            Some("text") => text_of(&part["text"]),
            Some("tool_use") => vec![Activity::Tool {
                name: printable(part["name"].as_str().unwrap_or("?")),
                input: tool_input(&part["input"]),
            }],
            _ => Vec::new(),
        })
        .collect()
}

fn claude_results(event: &Value) -> Vec<Activity> {
    let content = event["message"]["content"].as_array();
    content
        .into_iter()
        .flatten()
        .filter(|part| part["type"] == "tool_result")
        .map(|part| Activity::Output {
            text: bounded(&result_text(&part["content"])),
            error: part["is_error"].as_bool().unwrap_or(false),
        })
        .collect()
}

/// A tool result's content: a string, or a list of text parts.
fn result_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

fn claude_result(event: &Value) -> Activity {
    let how = if event["is_error"].as_bool().unwrap_or(false) {
        "failed"
    } else {
        "done"
    };
    let turns = event["num_turns"].as_u64().unwrap_or(0);
    let said = event["result"].as_str().unwrap_or_default();
    Activity::End {
        text: clip(
            &printable(&format!("{how} after {turns} turns: {said}")),
            LINE_CHARS * 2,
        ),
    }
}

fn opencode_tool(part: &Value) -> Vec<Activity> {
    let state = &part["state"];
    let mut out = vec![Activity::Tool {
        name: printable(part["tool"].as_str().unwrap_or("?")),
        input: tool_input(&state["input"]),
    }];
    let error = state["status"] == "error";
    let answer = match error {
        true => state["error"].as_str(),
        false => state["output"].as_str(),
    };
    if let Some(answer) = answer {
        out.push(Activity::Output {
            text: bounded(answer),
            error,
        });
    }
    out
}

fn opencode_error(error: &Value) -> String {
    let message = error["data"]["message"]
        .as_str()
        .or(error["message"].as_str())
        .map(str::to_string)
        .unwrap_or_else(|| error.to_string());
    let name = error["name"].as_str().unwrap_or("error");
    clip(&printable(&format!("{name}: {message}")), LINE_CHARS * 2)
}

fn text_of(text: &Value) -> Vec<Activity> {
    match text.as_str().map(str::trim) {
        Some(t) if !t.is_empty() => vec![Activity::Text { text: printable(t) }],
        _ => Vec::new(),
    }
}

/// What a tool was asked, on one line: its command or path when it has one, else its input.
fn tool_input(input: &Value) -> String {
    let named = ["command", "file_path", "filePath", "path", "pattern", "url"]
        .iter()
        .find_map(|k| input[*k].as_str());
    let text = match named {
        Some(s) => s.to_string(),
        None => input.to_string(),
    };
    clip(&printable(&text), LINE_CHARS)
}

/// The first lines of a tool's output, each clipped, with how many more there were.
fn bounded(text: &str) -> String {
    let text = printable(text);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let mut shown: Vec<String> = lines
        .iter()
        .take(OUTPUT_LINES)
        .map(|l| clip(l, LINE_CHARS))
        .collect();
    if lines.len() > OUTPUT_LINES {
        shown.push(format!("… {} more lines", lines.len() - OUTPUT_LINES));
    }
    shown.join("\n")
}

/// `s` with tabs as spaces. What could steer the reader's terminal stays in the activity, so
/// `--json` gives it as it was; each form escapes it where it is written.
fn printable(s: &str) -> String {
    s.replace('\t', " ")
}

impl Activity {
    /// The activity as a person reads it: a label, then the text, continued lines indented.
    pub fn human(&self) -> String {
        let (label, text) = match self {
            Activity::Started { model } => ("start", format!("model {model}")),
            Activity::Text { text } => ("text", text.clone()),
            Activity::Tool { name, input } => ("tool", format!("{name}: {input}")),
            Activity::Output { text, error: false } => ("", text.clone()),
            Activity::Output { text, error: true } => ("error", text.clone()),
            Activity::End { text } => ("end", text.clone()),
            Activity::Error { text } => ("error", text.clone()),
            Activity::Other { text } => ("?", text.clone()),
        };
        let mut out = String::new();
        for (i, line) in text.lines().enumerate() {
            let label = if i == 0 { label } else { "" };
            let line = crate::util::text::shown_line(line);
            out.push_str(&format!("{label:<6} {line}\n"));
        }
        out
    }
}

/// How `logs` prints activities.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
}

/// A writer that takes the raw stream in chunks of any size and writes its rendering to
/// `out`, a line once it is complete (a line cut mid-way waits for its end).
pub struct Renderer<W: Write> {
    out: W,
    format: Format,
    partial: Vec<u8>,
}

impl<W: Write> Renderer<W> {
    pub fn new(out: W, format: Format) -> Renderer<W> {
        Renderer {
            out,
            format,
            partial: Vec::new(),
        }
    }

    /// Forgets a cut line: the stream starts again (a requeued job's new attempt).
    pub fn restart(&mut self) {
        self.partial.clear();
    }

    fn line(&mut self, line: &[u8]) -> std::io::Result<()> {
        for activity in render(&String::from_utf8_lossy(line)) {
            match self.format {
                Format::Human => self.out.write_all(activity.human().as_bytes())?,
                Format::Json => {
                    let json = serde_json::to_string(&activity).map_err(std::io::Error::other)?;
                    writeln!(self.out, "{}", crate::util::text::json_shown(&json))?;
                }
            }
        }
        Ok(())
    }
}

impl<W: Write> Write for Renderer<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.partial.extend_from_slice(buf);
        while let Some(end) = self.partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.partial.drain(..=end).collect();
            self.line(&line)?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
#[path = "activity_tests.rs"]
mod tests;
