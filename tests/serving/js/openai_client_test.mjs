// strata serve through the official `openai` npm client: streaming and non-streaming
// completions and chat completions, usage, and the SDK's error classes. The greedy text
// is compared with `strata run --temp 0` on the same prompt (or the same prompt ids).
// Env: STRATA_BIN (the strata executable), STRATA_MODEL (stories260K.gguf),
// STRATA_CHAT_TEMPLATE (a Jinja chat template file for that model).
import { spawn, execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const bin = process.env.STRATA_BIN;
const model = process.env.STRATA_MODEL;
const template = process.env.STRATA_CHAT_TEMPLATE;
for (const [k, v] of Object.entries({ STRATA_BIN: bin, STRATA_MODEL: model, STRATA_CHAT_TEMPLATE: template })) {
  if (!v || !existsSync(v)) {
    console.error(`missing ${k}: ${v}`);
    process.exit(1);
  }
}

function runGreedy(args) {
  const out = execFileSync(bin, ['run', '--json', '--temp', '0', '--threads', '1', '-m', model, ...args],
    { stdio: ['ignore', 'pipe', 'ignore'] });
  return JSON.parse(out.toString());
}

// Starts the server on a free port; resolves with {proc, port}.
function startServer() {
  return new Promise((resolve, reject) => {
    const proc = spawn(bin, ['serve', '-m', model, '--port', '0', '--threads', '1', '--chat-template', template,
      '--served-model-name', 'stories', '--api-key', 'test-key'], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    const timer = setTimeout(() => reject(new Error('server did not start: ' + out)), 60000);
    proc.stdout.on('data', (d) => {
      out += d.toString();
      const m = out.match(/listening on http:\/\/[^:]+:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, port: Number(m[1]) });
      }
    });
    proc.on('exit', (code) => reject(new Error(`server exited (${code}): ${out}`)));
  });
}

const { proc, port } = await startServer();
const exited = new Promise((resolve) => proc.on('exit', (code) => resolve(code)));
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'test-key', maxRetries: 0, timeout: 60000 });
let failures = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

const prompt = 'Once upon a time';
const ref = runGreedy(['-n', '32', '-p', prompt]);

await check('models.list', async () => {
  const list = await client.models.list();
  assert.deepEqual(list.data.map((m) => m.id), ['stories']);
});

await check('completions, non-streaming', async () => {
  const r = await client.completions.create({ model: 'stories', prompt, max_tokens: 32, temperature: 0 });
  assert.equal(r.choices[0].text, ref.text);
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.prompt_tokens, ref.prompt_ids.length);
  assert.equal(r.usage.completion_tokens, 32);
});

await check('completions, streaming with usage', async () => {
  const stream = await client.completions.create({ model: 'stories', prompt, max_tokens: 32, temperature: 0,
    stream: true, stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, ref.text);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 32);
  assert.equal(usage.total_tokens, 32 + ref.prompt_ids.length);
});

const messages = [{ role: 'user', content: 'Tell me a story' }];
const tok = await fetch(`http://127.0.0.1:${port}/tokenize`, {
  // fetch() labels a string body text/plain unless told; the server takes JSON only (415).
  method: 'POST', headers: { Authorization: 'Bearer test-key', 'Content-Type': 'application/json' },
  body: JSON.stringify({ messages }),
}).then((r) => r.json());
const chatRef = runGreedy(['-n', '24', '--prompt-ids', tok.tokens.join(',')]);

await check('chat.completions, non-streaming', async () => {
  const r = await client.chat.completions.create({ model: 'stories', messages, max_completion_tokens: 24, temperature: 0 });
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].message.content, chatRef.text);
  assert.equal(r.usage.prompt_tokens, tok.tokens.length);
});

await check('chat.completions, streaming', async () => {
  const stream = await client.chat.completions.create({ model: 'stories', messages, max_tokens: 24, temperature: 0,
    stream: true, stream_options: { include_usage: true } });
  let text = '';
  let role = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) text += c.delta.content;
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(text, chatRef.text);
  assert.equal(usage.prompt_tokens, tok.tokens.length);
});

await check('n = 2 and a stop list', async () => {
  const r = await client.completions.create({ model: 'stories', prompt, max_tokens: 32, temperature: 0, n: 2,
    stop: ['Lily', 'zebra'] });
  assert.equal(r.choices.length, 2);
  for (const c of r.choices) {
    assert.equal(c.text, ref.text.slice(0, ref.text.indexOf('Lily')));
    assert.equal(c.finish_reason, 'stop');
  }
});

await check('errors become the SDK error classes', async () => {
  await assert.rejects(client.completions.create({ model: 'gpt-4', prompt, max_tokens: 4 }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404);
  await assert.rejects(client.completions.create({ model: 'stories', prompt, temperature: 'hot' }),
    (e) => e instanceof OpenAI.BadRequestError && e.error?.param === 'temperature');
  const noKey = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(noKey.models.list(), (e) => e instanceof OpenAI.AuthenticationError && e.status === 401);
});

await check('an aborted stream is cancelled on the server', async () => {
  const ac = new AbortController();
  const stream = await client.completions.create({ model: 'stories', prompt, max_tokens: 1500, ignore_eos: true,
    stream: true }, { signal: ac.signal });
  let n = 0;
  try {
    for await (const chunk of stream) {
      if (++n === 5) ac.abort();
    }
  } catch (e) { /* the abort surfaces as an error */ }
  let running = -1;
  for (let i = 0; i < 200 && running !== 0; i++) {
    const m = await fetch(`http://127.0.0.1:${port}/metrics`).then((r) => r.text());
    running = Number(m.match(/^strata_num_requests_running\{[^}]*\} (\d+)/m)[1]);
    if (running !== 0) await new Promise((r) => setTimeout(r, 20));
  }
  assert.equal(running, 0);
});

proc.kill('SIGTERM');
const code = await exited;
await check('SIGTERM exits 0', async () => assert.equal(code, 0));
console.log(failures === 0 ? 'all passed' : `${failures} failed`);
process.exit(failures === 0 ? 0 : 1);
