/**
 * Which files a shell command line reads and which it writes, as far as a
 * reader of the line alone can tell (nothing is run). Conservative by design:
 * what it cannot read with confidence it leaves out, so a count built on it
 * errs low, never high.
 *
 * 1. The line is split into simple commands at unquoted `;`, `&`, `|`, `&&`,
 *    `||` and newlines; heredoc bodies (`<<EOF` … `EOF`) are skipped, they are
 *    text, not commands. Redirections are cut out as operators; each command's
 *    words are then split and unquoted by `shellWords` (codex.ts).
 * 2. Reads: the file operands of a reading program — cat, head, tail, less,
 *    more, nl, wc, diff, grep/egrep/fgrep/rg (after the pattern), sed without
 *    -i (after the script) — and a `< file` into one of them.
 * 3. Writes: `> file`, `>> file`, `>| file`, `&> file`; the operands of tee;
 *    the file operands of `sed -i` (an edit, not a read).
 * 4. `cd DIR` moves where the command's later relative paths resolve (from
 *    the workspace at the start of each call); `bash -c SCRIPT` / `sh -c` are
 *    read as SCRIPT.
 * Not seen: files other programs touch (python, cp, mv, git, awk, editors),
 * and words holding `$`, a backquote, a glob character or a leading `~`
 * (expansions this reader does not evaluate).
 */
import { posix } from "node:path";
import { shellWords } from "./codex.ts";

export interface FileTouch {
  kind: "read" | "edit";
  /** Absolute, normalised (`/workspace/a/../b.py` is `/workspace/b.py`). */
  path: string;
}

/** Marks an operator the scanner found outside quotes; shellWords keeps it inside the word it leads. */
const OP = "\u0001";

/** The touches of a shell command line run in `cwd`, in the order its commands run (per command: reads, then writes). */
export function shellTouches(line: string, cwd: string): FileTouch[] {
  return scriptTouches(line, cwd, 0);
}

function scriptTouches(script: string, startCwd: string, depth: number): FileTouch[] {
  const touches: FileTouch[] = [];
  let cwd: string | null = startCwd;
  for (const piece of simpleCommands(script)) {
    const words = shellWords(piece);
    // An unterminated quote: the shell refuses the line; taken as touching nothing (errs low).
    if (words === null) return [];
    const command = parseCommand(words);
    if (!command) continue;
    const { program, args, redirects } = command;
    if (program === "cd") {
      // `cd`, `cd -`, `cd ~`, `cd $D`: somewhere this reader cannot tell, so the call's later relative paths are left out.
      cwd = args.length === 1 && cwd !== null && plainWord(args[0]!) ? resolvePath(cwd, args[0]!) : null;
      continue;
    }
    if (cwd === null) continue;
    if ((program === "bash" || program === "sh") && /^-[a-z]*c$/.test(args[0] ?? "") && args[1] !== undefined && depth < 2) {
      touches.push(...scriptTouches(args[1], cwd, depth + 1));
      continue;
    }
    const { reads, edits } = programTouches(program, args, redirects.input);
    const add = (kind: FileTouch["kind"], words: string[]) => {
      for (const w of words.filter(plainWord)) {
        const path = resolvePath(cwd!, w);
        if (!DEVICES.test(path)) touches.push({ kind, path });
      }
    };
    add("read", reads);
    add("edit", [...edits, ...redirects.output]);
  }
  return touches;
}

const resolvePath = (cwd: string, p: string) => posix.resolve(cwd, p);

/** `2>/dev/null` writes no file the agent could re-read. */
const DEVICES = /^\/(dev|proc)\//;

/** A word that names one file as written: no expansion left for the shell to do. */
const plainWord = (w: string) => w !== "" && w !== "-" && !/[$`*?[]/.test(w) && !w.startsWith("~") && !w.startsWith(OP);

/**
 * The simple commands of a script, as text with every redirection operator
 * set apart as its own OP-marked word. Quoted text is copied as it is (quotes
 * and all) for shellWords; heredoc bodies are dropped.
 */
function simpleCommands(script: string): string[] {
  const out: string[] = [];
  let piece = "";
  let wordStart = 0;
  const heredocs: { delim: string; tabs: boolean }[] = [];
  const cut = () => {
    if (piece.trim()) out.push(piece);
    piece = "";
    wordStart = 0;
  };
  const op = (text: string) => {
    piece += ` ${OP}${text} `;
    wordStart = piece.length;
  };
  for (let i = 0; i < script.length; i++) {
    const c = script[i]!;
    const next = script[i + 1];
    if (c === "'" || c === '"') {
      const end = closingQuote(script, i);
      piece += script.slice(i, end + 1);
      i = end;
    } else if (c === "\\") {
      piece += script.slice(i, i + 2);
      i++;
    } else if (c === "\n") {
      cut();
      i = skipHeredocBodies(script, i, heredocs.splice(0));
    } else if (c === ";" || c === "|" || c === "(" || c === ")" || (c === "&" && next !== ">")) {
      // `(` and `)` cut too: a subshell's, a `$(…)`'s or a `<(…)`'s commands run as commands of their own.
      cut();
      if (next === c || (c === "|" && next === "&")) i++;
    } else if (c === "<" && next === "<" && script[i + 2] !== "<") {
      // A heredoc: its delimiter word (quotes removed), then nothing of it stays in the command.
      let j = i + 2;
      const tabs = script[j] === "-";
      if (tabs) j++;
      while (script[j] === " " || script[j] === "\t") j++;
      let k = j;
      while (k < script.length && !" \t\n;&|<>()".includes(script[k]!)) k = script[k] === "'" || script[k] === '"' ? closingQuote(script, k) + 1 : k + 1;
      heredocs.push({ delim: script.slice(j, k).replace(/['"\\]/g, ""), tabs });
      i = k - 1;
    } else if (c === "<" || c === ">" || (c === "&" && next === ">")) {
      // An fd number written against the operator (`2>`) belongs to it, not to the command's words.
      if (/^\d+$/.test(piece.slice(wordStart))) piece = piece.slice(0, wordStart);
      let text = c;
      for (let j = i + 1; j < script.length && text.length < 3 && /^(<<<?|>>?|>\||&>>?|[<>]&|<>)$/.test(text + script[j]); j++) text += script[j];
      i += text.length - 1;
      op(text);
    } else {
      if (c === " " || c === "\t") wordStart = piece.length + 1;
      piece += c;
    }
  }
  cut();
  return out;
}

/**
 * Past the bodies of the heredocs a line opened: each runs up to its
 * delimiter line (leading tabs stripped for `<<-`). `newline`: the index of
 * the newline ending the opening line; returns that of the newline ending the
 * last body (the end of the text when a body is unterminated).
 */
function skipHeredocBodies(script: string, newline: number, docs: { delim: string; tabs: boolean }[]): number {
  let at = newline;
  for (const h of docs) {
    while (at < script.length) {
      const end = script.indexOf("\n", at + 1);
      const lineEnd = end === -1 ? script.length : end;
      const text = script.slice(at + 1, lineEnd);
      at = lineEnd;
      if ((h.tabs ? text.replace(/^\t+/, "") : text) === h.delim) break;
    }
  }
  return at;
}

/** The index of the quote closing the one at `i` (double quotes honour backslashes); the end of the text when unclosed. */
function closingQuote(s: string, i: number): number {
  const q = s[i]!;
  for (let j = i + 1; j < s.length; j++) {
    if (q === '"' && s[j] === "\\") j++;
    else if (s[j] === q) return j;
  }
  return s.length - 1;
}

interface Command {
  program: string;
  args: string[];
  redirects: { input: string[]; output: string[] };
}

/** Shell words that lead a command without being it (grouping, keywords, wrappers). */
const LEADERS = new Set(["(", ")", "{", "}", "!", "if", "then", "else", "elif", "do", "while", "until", "time", "command", "exec", "nohup", "sudo", "env"]);
const ASSIGNMENT = /^[A-Za-z_][A-Za-z0-9_]*=/;

function parseCommand(words: string[]): Command | null {
  const redirects = { input: [] as string[], output: [] as string[] };
  const rest: string[] = [];
  for (let i = 0; i < words.length; i++) {
    const w = words[i]!;
    if (!w.startsWith(OP)) {
      rest.push(w);
      continue;
    }
    const target = words[i + 1];
    i++;
    if (target === undefined || target.startsWith(OP)) return null;
    const op = w.slice(OP.length);
    if (op === "<") redirects.input.push(target);
    else if ([">", ">>", ">|", "&>", "&>>"].includes(op)) redirects.output.push(target);
    // `>&2`, `<&0`, `<<<` here-strings, `<>`: a descriptor or text, not a file this reader follows.
  }
  let k = 0;
  while (k < rest.length && (LEADERS.has(rest[k]!) || ASSIGNMENT.test(rest[k]!))) k++;
  if (k >= rest.length) return redirects.output.length ? { program: "", args: [], redirects } : null;
  return { program: posix.basename(rest[k]!), args: rest.slice(k + 1), redirects };
}

/** Per reading program: its options that take a value (`-n 20`), and whether its first operand is a pattern or script, not a file. */
const READERS: Record<string, { valued: string; pattern?: true }> = {
  cat: { valued: "" },
  head: { valued: "nc" },
  tail: { valued: "nc" },
  less: { valued: "" },
  more: { valued: "" },
  nl: { valued: "bdfhilnsvw" },
  wc: { valued: "" },
  diff: { valued: "CUxXIFLS" },
  grep: { valued: "efmABCdD", pattern: true },
  egrep: { valued: "efmABCdD", pattern: true },
  fgrep: { valued: "efmABCdD", pattern: true },
  rg: { valued: "efmABCgtTMj", pattern: true },
};

/** The operands a program reads and those it writes, from its arguments. */
function programTouches(program: string, args: string[], input: string[]): { reads: string[]; edits: string[] } {
  if (program === "tee") return { reads: [], edits: operands(args, "").files };
  if (program === "sed") {
    const { files, given, inPlace } = operands(args, "efl", "i");
    const fileArgs = given ? files : files.slice(1);
    return inPlace ? { reads: [], edits: fileArgs } : { reads: [...fileArgs, ...input], edits: [] };
  }
  const reader = READERS[program];
  if (!reader) return { reads: [], edits: [] };
  const { files, given } = operands(args, reader.valued);
  // grep -e PATTERN / -f FILE name the pattern by option: every operand is then a file.
  return { reads: [...(reader.pattern && !given ? files.slice(1) : files), ...input], edits: [] };
}

/**
 * A command's operands, past its options. `valued`: short options taking a
 * value (given as the rest of the word or the next word); `given`: whether
 * one of `e`/`f` (a script or pattern by option) was among them.
 * `flag`: a short option whose presence is reported (`inPlace`); for sed's
 * `-i[SUFFIX]` the rest of its word is its suffix. Long options: `--in-place`
 * counts as the flag; `--expression`/`--regexp`/`--file` as given; a long
 * option's value must be joined with `=` to be skipped.
 */
function operands(args: string[], valued: string, flag?: string): { files: string[]; given: boolean; inPlace: boolean } {
  const files: string[] = [];
  let given = false;
  let inPlace = false;
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    if (a === "--") {
      files.push(...args.slice(i + 1));
      break;
    }
    if (a.startsWith("--")) {
      if (flag && a.startsWith("--in-place")) inPlace = true;
      if (/^--(expression|regexp|file)(=|$)/.test(a)) {
        given = true;
        if (!a.includes("=")) i++;
      }
      continue;
    }
    if (!a.startsWith("-") || a === "-") {
      files.push(a);
      continue;
    }
    for (let j = 1; j < a.length; j++) {
      const o = a[j]!;
      if (o === flag) {
        inPlace = true;
        break;
      }
      if (valued.includes(o)) {
        if (o === "e" || o === "f") given = true;
        if (j === a.length - 1) i++;
        break;
      }
    }
  }
  return { files, given, inPlace };
}
