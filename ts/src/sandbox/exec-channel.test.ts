/**
 * The host's end of execd's frames, against a scripted stream (no container): output and
 * results arrive whole however the bytes are cut, and a stream that stops making sense fails
 * the channel's commands with a clear error instead of throwing out of the socket's handler.
 */
import { Duplex } from "node:stream";
import { describe, expect, it } from "vitest";
import { ExecChannel, encodeRun } from "./exec-channel.ts";

/** A stand-in for the attach stream: what the channel writes is kept, what we push it reads. */
function fakeAttach(): { stream: Duplex; sent: Buffer[] } {
  const sent: Buffer[] = [];
  const stream = new Duplex({
    read() {},
    write(chunk: Buffer, _enc, done) {
      sent.push(chunk);
      done();
    },
  });
  return { stream, sent };
}

/** One execd frame inside one Docker multiplex record (stream 1 = stdout). */
function fromExecd(type: string, id: number, payload: Buffer, stream = 1): Buffer {
  const frame = Buffer.alloc(9 + payload.length);
  frame.write(type, 0, "latin1");
  frame.writeUInt32LE(id, 1);
  frame.writeUInt32LE(payload.length, 5);
  payload.copy(frame, 9);
  const head = Buffer.alloc(8);
  head[0] = stream;
  head.writeUInt32BE(frame.length, 4);
  return Buffer.concat([head, frame]);
}

function exit(code: number): Buffer {
  const b = Buffer.alloc(6);
  b.writeUInt32LE(code, 0);
  return b;
}

const request = { argv: ["echo", "hi"], uid: 1000, gid: 1000, env: {}, workdir: "", timeoutMs: 0, graceMs: 5000 };

describe("ExecChannel", () => {
  it("delivers output and the exit status whole, however the stream's bytes are cut", async () => {
    const whole = Buffer.concat([
      fromExecd("O", 1, Buffer.from("hel")),
      fromExecd("E", 1, Buffer.from("warn\n")),
      fromExecd("O", 1, Buffer.from("lo\n")),
      fromExecd("X", 1, exit(3)),
    ]);
    for (const cut of [1, 2, 7, 8, 9, 13, whole.length]) {
      const { stream } = fakeAttach();
      const channel = ExecChannel.over(stream);
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      const run = channel.run(request, (c) => out.push(c), (c) => err.push(c));
      for (let i = 0; i < whole.length; i += cut) stream.push(whole.subarray(i, i + cut));
      await expect(run.done).resolves.toEqual({ exitCode: 3, timedOut: false });
      expect(Buffer.concat(out).toString()).toBe("hello\n");
      expect(Buffer.concat(err).toString()).toBe("warn\n");
    }
  });

  it("sends one run frame per command, with distinct ids", () => {
    const { stream, sent } = fakeAttach();
    const channel = ExecChannel.over(stream);
    const a = channel.run(request, () => {}, () => {});
    const b = channel.run(request, () => {}, () => {});
    expect(a.id).not.toBe(b.id);
    expect(sent.map((f) => f.toString("latin1", 0, 1))).toEqual(["R", "R"]);
    expect(sent[0]).toEqual(encodeRun(a.id, request));
  });

  for (const [what, bytes] of [
    ["a short exit frame", fromExecd("X", 1, Buffer.alloc(2))],
    ["a frame of an unknown type", fromExecd("Z", 1, Buffer.alloc(0))],
    ["a multiplex record naming neither stdout nor stderr", fromExecd("X", 1, exit(0), 3)],
  ] as const) {
    it(`${what} fails the channel's commands, now and later, without throwing out of the stream`, async () => {
      const { stream } = fakeAttach();
      const channel = ExecChannel.over(stream);
      const run = channel.run(request, () => {}, () => {});
      stream.push(bytes);
      await expect(run.done).rejects.toThrow(/corrupt|not Docker's multiplexed stream/);
      await expect(channel.run(request, () => {}, () => {}).done).rejects.toThrow(/corrupt|not Docker's multiplexed stream/);
    });
  }

  it("an ended stream fails pending commands, saying what execd last complained of", async () => {
    const { stream } = fakeAttach();
    const channel = ExecChannel.over(stream);
    const run = channel.run(request, () => {}, () => {});
    const complaint = Buffer.from("lego-execd: poll: boom\n");
    const head = Buffer.alloc(8);
    head[0] = 2;
    head.writeUInt32BE(complaint.length, 4);
    stream.push(Buffer.concat([head, complaint]));
    stream.push(null);
    await expect(run.done).rejects.toThrow(/stream ended \(execd: lego-execd: poll: boom\)/);
  });

  it("refuses bad input before sending anything", () => {
    const { stream, sent } = fakeAttach();
    const channel = ExecChannel.over(stream);
    expect(() => channel.run({ ...request, argv: [] }, () => {}, () => {})).toThrow(/at least its program/);
    expect(() => channel.run({ ...request, argv: ["a\0b"] }, () => {}, () => {})).toThrow(/NUL byte/);
    expect(() => channel.run({ ...request, env: { "": "x" } }, () => {}, () => {})).toThrow(/empty or holds '='/);
    expect(() => channel.run({ ...request, timeoutMs: Number.POSITIVE_INFINITY }, () => {}, () => {})).toThrow(/out of range/);
    expect(sent).toEqual([]);
  });
});
