// quest-runner's opencode plugin: keeps opencode's own file tools inside the job's checkout.
//
// opencode's bash tool runs every command inside srt, but its file tools (read, write, edit,
// apply_patch, glob, grep, lsp, ...) run in opencode's own, unsandboxed process. This plugin
// refuses a call before it runs when a path it names resolves, after every symbolic link is
// followed, outside the places the job may use: reads inside the checkout or a read root
// (the job's temp dir, opencode's own tool-output dir), writes inside the checkout only, and
// never into a `.git` component or a file the sandbox also protects from commands. A path
// whose tail does not exist yet is judged by the nearest existing ancestor, so a dangling
// link cannot aim a write outside either. Anything the plugin does not understand is refused.
//
// The runner renders this file: __QUEST_CHECKOUT__ becomes a JSON string (the checkout's
// canonical path), __QUEST_READ_ROOTS__ a JSON array of further read-only roots, and
// __QUEST_DENY_WRITE__ a JSON array of paths never written, even inside the checkout (the
// policy's deny_write: the checkout's `.git` pointer, agent configuration, ...). Loaded
// from `plugin/` in opencode's global config directory; opencode 1.18 calls every exported
// function with the plugin context and uses the hooks it returns, so this module exports
// nothing but that one function. Its `config` hook turns on the file tools the runner's
// opencode.json turns off, so they exist only while this plugin is in force.

import fs from "node:fs";
import path from "node:path";

const CHECKOUT = __QUEST_CHECKOUT__;
const READ_ROOTS = __QUEST_READ_ROOTS__;
const DENY_WRITE = __QUEST_DENY_WRITE__;

// Tools that touch no path of the file system themselves, or that are confined otherwise
// (bash runs inside srt). Every other tool is checked; an unknown one with no path argument
// that we recognise is refused, so a tool added by a later opencode fails closed.
const PATHLESS = new Set([
  "bash",
  "task",
  "todowrite",
  "todoread",
  "skill",
  "question",
  "invalid",
  "plan_enter",
  "plan_exit",
]);
// Tools that run in opencode's own process with network access: never, whatever the config.
const DENIED = new Set(["webfetch", "websearch", "codesearch"]);
const WRITE_TOOLS = new Set(["write", "edit", "multiedit", "apply_patch", "patch"]);
// The names srt denies commands to write in any writable tree (its "mandatory deny paths"):
// the file tools may not write them either.
const PROTECTED_NAMES = new Set(__QUEST_PROTECTED_NAMES__);
const PROTECTED_DIRS = [
  [".claude", "commands"],
  [".claude", "agents"],
];
const PATH_KEYS = ["filePath", "file_path", "path", "filepath", "filename", "dir", "directory"];
const PATH_LIST_KEYS = ["filePaths", "paths", "files"];

class Refused extends Error {}

function refuse(message) {
  throw new Refused(`quest-runner: ${message}`);
}

// The path `p` (absolute, as the tool will hand it to the kernel: never normalised first) with
// every symbolic link followed, including a last component that is a dangling link, walked the
// way the kernel walks it: a `..` goes up from where the links so far have led, not from the
// text before it. A `..` after a followed link is refused outright: the kernel and a tool that
// normalises the text itself (`path.resolve`) would land in different places, and only one of
// them is what was judged. Components past the first one that does not exist are kept as
// written (normalised): nothing below a missing directory can be a link.
function resolveReal(p) {
  let rest = p.split("/").filter((s) => s.length > 0);
  let current = "/";
  let hops = 0;
  while (rest.length > 0) {
    const name = rest.shift();
    if (name === ".") continue;
    if (name === "..") {
      if (hops > 0) refuse(`${p}: ".." after a symbolic link is not allowed; name the file without it`);
      current = path.dirname(current);
      continue;
    }
    const next = path.join(current, name);
    let st;
    try {
      st = fs.lstatSync(next);
    } catch (e) {
      if (e && e.code === "ENOENT") return path.join(next, ...rest);
      refuse(`cannot inspect ${next} (${e && e.code ? e.code : e})`);
    }
    if (st.isSymbolicLink()) {
      if (++hops > 40) refuse(`too many symbolic links in ${p}`);
      const target = fs.readlinkSync(next);
      rest = [...target.split("/").filter((s) => s.length > 0), ...rest];
      if (target.startsWith("/")) current = "/";
      continue;
    }
    if (rest.length > 0 && !st.isDirectory()) {
      // "file/more": the tool would fail anyway; judge the path as written.
      return path.join(next, ...rest);
    }
    current = next;
  }
  return current;
}

function canonicalRoot(p) {
  try {
    return fs.realpathSync(p);
  } catch {
    return path.resolve(p);
  }
}

const CHECKOUT_REAL = canonicalRoot(CHECKOUT);
// The directory relative paths are resolved against; set when opencode loads the plugin.
let base = CHECKOUT;
const READ_ROOTS_REAL = READ_ROOTS.map(canonicalRoot);
// Denied paths need not exist: judged like any other path, links followed.
const DENY_WRITE_REAL = DENY_WRITE.map((p) => resolveReal(path.resolve(p)));

function within(p, root) {
  return p === root || p.startsWith(root.endsWith("/") ? root : root + "/");
}

function checkPath(tool, raw, write) {
  if (typeof raw !== "string" || raw.length === 0) refuse(`${tool}: missing path`);
  if (raw.includes("\0")) refuse(`${tool}: bad path`);
  let p = raw;
  if (p === "~" || p.startsWith("~/")) refuse(`${tool}: ${raw} is outside the checkout`);
  if (p.startsWith("file://")) {
    try {
      p = new URL(p).pathname;
    } catch {
      refuse(`${tool}: bad path ${raw}`);
    }
  }
  // Joined, not resolved: `path.resolve` would drop `link/..` as text, while the kernel follows
  // the link first and then goes up from its target.
  const absolute = p.startsWith("/") ? p : `${base}/${p}`;
  const real = resolveReal(absolute);
  if (write) {
    if (!within(real, CHECKOUT_REAL)) {
      refuse(`${tool}: ${raw} is outside the checkout ${CHECKOUT}; file tools may only write there`);
    }
    if (DENY_WRITE_REAL.some((d) => within(real, d))) refuse(`${tool}: ${raw} may not be written in this job`);
    const parts = path.relative(CHECKOUT_REAL, real).split("/");
    if (parts.includes(".git")) refuse(`${tool}: ${raw} is inside .git; use git commands instead`);
    if (parts.some((s) => PROTECTED_NAMES.has(s))) refuse(`${tool}: ${raw} is a protected file`);
    for (const [a, b] of PROTECTED_DIRS) {
      for (let i = 0; i + 1 < parts.length; i++) {
        if (parts[i] === a && parts[i + 1] === b) refuse(`${tool}: ${raw} is a protected file`);
      }
    }
    return;
  }
  if (within(real, CHECKOUT_REAL) || READ_ROOTS_REAL.some((r) => within(real, r))) return;
  refuse(`${tool}: ${raw} is outside the checkout ${CHECKOUT}; file tools may only read there`);
}

// Paths named by an apply_patch text: "*** Add File: p", "*** Update File: p",
// "*** Delete File: p", "*** Move to: p".
function patchPaths(text) {
  if (typeof text !== "string") refuse("apply_patch: missing patch text");
  const out = [];
  for (const line of text.split(/\r?\n/)) {
    const m = /^\*\*\*\s*(?:Add File|Update File|Delete File|Move to)\s*:\s*(.*?)\s*$/.exec(line);
    if (m) out.push(m[1]);
  }
  return out;
}

// Glob patterns are relative to the search directory; one that climbs out of it or is
// absolute is refused rather than interpreted.
function checkPattern(tool, pattern) {
  if (pattern === undefined || pattern === null) return;
  if (typeof pattern !== "string") refuse(`${tool}: bad pattern`);
  if (pattern.startsWith("/") || pattern.startsWith("~") || /(^|[\\/])\.\.([\\/]|$)/.test(pattern)) {
    refuse(`${tool}: the pattern ${pattern} reaches outside the search directory`);
  }
}

function check(tool, args) {
  if (DENIED.has(tool)) refuse(`${tool}: not available in this job`);
  if (PATHLESS.has(tool)) return;
  if (tool.startsWith("mcp") || tool.includes("_mcp_")) refuse(`${tool}: MCP tools are not available`);
  const a = args && typeof args === "object" ? args : {};
  const write = WRITE_TOOLS.has(tool);
  const paths = [];
  if (tool === "apply_patch" || tool === "patch") {
    paths.push(...patchPaths(a.patchText ?? a.patch ?? a.input));
    if (paths.length === 0) refuse(`${tool}: the patch names no file`);
  }
  if (tool === "glob" || tool === "grep") {
    checkPattern(tool, tool === "glob" ? a.pattern : undefined);
    checkPattern(tool, a.include);
    // No path: the search runs in opencode's directory.
    paths.push(a.path === undefined || a.path === null || a.path === "" ? base : a.path);
  }
  for (const k of PATH_KEYS) {
    if (k === "path" && (tool === "glob" || tool === "grep")) continue;
    if (a[k] !== undefined) paths.push(a[k]);
  }
  for (const k of PATH_LIST_KEYS) {
    if (a[k] === undefined) continue;
    if (!Array.isArray(a[k])) refuse(`${tool}: bad ${k}`);
    paths.push(...a[k]);
  }
  if (Array.isArray(a.edits)) {
    for (const e of a.edits) if (e && e.filePath !== undefined) paths.push(e.filePath);
  }
  if (paths.length === 0) refuse(`${tool}: not allowed in this job (no path to check)`);
  for (const p of paths) checkPath(tool, p, write);
}

// Permission rules for the file tools, which the runner's opencode.json denies outright: they
// exist only once this plugin has loaded (opencode skips a plugin that fails to load without
// a word, so a broken plugin must leave the tools off, not unchecked). opencode matches read
// and edit rules against the path relative to its worktree, the last matching rule winning:
// a second, lexical fence behind the checks above.
function fileToolPermissions(worktree) {
  const rules = (roots) => {
    const out = { "*": "deny" };
    for (const root of roots) {
      const rel = path.relative(worktree, root);
      if (rel === "") {
        out["*"] = "allow";
        out["../*"] = "deny";
      } else {
        out[rel] = "allow";
        out[`${rel}/*`] = "allow";
      }
    }
    return out;
  };
  return {
    read: rules([CHECKOUT_REAL, ...READ_ROOTS_REAL]),
    edit: rules([CHECKOUT_REAL]),
    glob: "allow",
    grep: "allow",
    list: "allow",
  };
}

export const QuestRunnerConfine = async (ctx) => {
  // Relative paths are resolved as the tools resolve them: against opencode's directory.
  // Canonical, so a link above the checkout (a state dir that is a link) does not count as a
  // link followed before a relative path's own `..`.
  base = canonicalRoot(typeof ctx?.directory === "string" && ctx.directory ? ctx.directory : CHECKOUT);
  // opencode's read and edit rules see paths relative to its worktree ("/" outside git).
  const worktree = canonicalRoot(typeof ctx?.worktree === "string" && ctx.worktree ? ctx.worktree : base);
  return {
    config: async (config) => {
      config.permission = { ...(config.permission ?? {}), ...fileToolPermissions(worktree) };
    },
    "tool.execute.before": async (input, output) => {
      check(String(input && input.tool), output && output.args);
    },
  };
};
