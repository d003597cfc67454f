import { spawn } from 'node:child_process';
import { createHmac } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { startStack, type Stack } from '@lab/testing';
import { call } from '../../gateway/test/http';
import { eventually, Receiver, type Received } from './receiver';

// The verification snippets of docs/webhooks.md, run as an integrator would run
// them (node and python3 processes) against a real signed delivery.
process.env.LAB_WEBHOOKS_ALLOW_PRIVATE_NETWORKS = 'true';
process.env.LAB_WEBHOOKS_POLL_MS = '50';

const doc = readFileSync(resolve(__dirname, '../../../docs/webhooks.md'), 'utf8');
const snippet = (lang: string) => {
  const blocks = [...doc.matchAll(new RegExp('```' + lang + '\\n([\\s\\S]*?)```', 'g'))].map((m) => m[1]!);
  expect(blocks).toHaveLength(1);
  return blocks[0]!;
};

/**
 * Runs a program with {secrets, header} in its environment and the raw body on
 * stdin. Not spawnSync: a blocked event loop misses the gateway closing an idle
 * keep-alive connection, and the next fetch then meets ECONNRESET.
 */
function run(cmd: string, args: string[], secrets: string[], header: string, body: Buffer): Promise<{ stdout: string; stderr: string }> {
  return new Promise((resolveRun, fail) => {
    const child = spawn(cmd, args, { env: { ...process.env, SECRETS: JSON.stringify(secrets), HEADER: header } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    child.stderr.on('data', (c: Buffer) => (stderr += c.toString()));
    child.on('error', fail);
    child.on('close', () => resolveRun({ stdout, stderr }));
    child.stdin.end(body);
  });
}

// each harness prints true or false
const runners = {
  node: (secrets: string[], header: string, body: Buffer) =>
    run(
      process.execPath,
      [
        '-e',
        `${snippet('js')}\nprocess.stdout.write(String(verifyWebhook(JSON.parse(process.env.SECRETS), process.env.HEADER, require('node:fs').readFileSync(0))));`,
      ],
      secrets,
      header,
      body,
    ),
  python: (secrets: string[], header: string, body: Buffer) =>
    run(
      'python3',
      [
        '-c',
        `${snippet('python')}\nimport json, os, sys\nprint(str(verify_webhook(json.loads(os.environ["SECRETS"]), os.environ["HEADER"], sys.stdin.buffer.read())).lower(), end="")`,
      ],
      secrets,
      header,
      body,
    ),
};

let stack: Stack;
let org: string;
let token: string;
const receivers: Receiver[] = [];

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'notebook', 'audit', 'webhooks'] });
  org = (await stack.admin.createOrg()).id;
  token = (await stack.admin.createApiKey(org, { scopes: ['write'] })).token;
});

afterAll(async () => {
  for (const r of receivers) await r.stop();
  await stack?.stop();
});

const sign = (secret: string, t: number, body: Buffer) => createHmac('sha256', secret).update(`${t}.`).update(body).digest('hex');

test.each(Object.keys(runners) as (keyof typeof runners)[])('the %s snippet verifies a real delivery and refuses forgeries', async (lang) => {
  // a receiver of its own: the other test's subscription gets this sample too
  const receiver = await new Receiver().start();
  receivers.push(receiver);
  const sub = await call(stack.url, 'POST', `/admin/v1/orgs/${org}/webhook-subscriptions`, {
    token: stack.operatorToken,
    body: { url: receiver.url, events: ['sample.created'] },
  });
  expect(sub.status).toBe(201);
  const secret = sub.body.data.secret as string;
  const sample = await call(stack.url, 'POST', '/v1/samples', { token, body: { name: `signed-${lang}` } });
  expect(sample.status).toBe(201);
  const delivery: Received = await eventually(() => receiver.requests.find((r) => r.body.data?.id === sample.body.data.id));
  const header = String(delivery.headers['x-service-signature']);
  const verify = async (secrets: string[], h: string, body: Buffer) => {
    const out = await runners[lang](secrets, h, body);
    expect(out.stderr).toBe('');
    return out.stdout;
  };

  expect(await verify([secret], header, delivery.raw)).toBe('true');
  // the old secret beside the new one, as during a rotation
  expect(await verify(['an old secret', secret], header, delivery.raw)).toBe('true');
  expect(await verify(['not the secret'], header, delivery.raw)).toBe('false');
  expect(await verify([secret], header, Buffer.concat([delivery.raw, Buffer.from(' ')]))).toBe('false');
  // the same bytes parsed and re-serialised are other bytes
  expect(await verify([secret], header, Buffer.from(JSON.stringify(delivery.body, null, 1)))).toBe('false');

  const now = Math.floor(Date.now() / 1000);
  const raw = delivery.raw;
  // two v1 values, the matching one second, with whitespace and an unknown part
  expect(await verify([secret], ` t=${now} , v0=abc, v1=${sign('old', now, raw)} ,v1=${sign(secret, now, raw)}`, raw)).toBe('true');
  expect(await verify([secret], `t=${now - 400},v1=${sign(secret, now - 400, raw)}`, raw)).toBe('false'); // too old
  expect(await verify([secret], `t=${now + 400},v1=${sign(secret, now + 400, raw)}`, raw)).toBe('false'); // too far ahead
  expect(await verify([secret], `t=${now},t=${now},v1=${sign(secret, now, raw)}`, raw)).toBe('false'); // two t=
  expect(await verify([secret], `v1=${sign(secret, now, raw)}`, raw)).toBe('false'); // no t=
  expect(await verify([secret], `t=${now}`, raw)).toBe('false'); // no v1=
  expect(await verify([secret], '', raw)).toBe('false');
});

test('the standardwebhooks snippet verifies a real standard-webhooks delivery, during a rotation too, and refuses forgeries', async () => {
  const receiver = await new Receiver().start();
  receivers.push(receiver);
  const admin = (method: string, path: string, body?: unknown) =>
    call(stack.url, method, `/admin/v1/orgs/${org}/webhook-subscriptions${path}`, { token: stack.operatorToken, body });
  const sub = await admin('POST', '', { url: receiver.url, events: ['sample.created'], signature_scheme: 'standard-webhooks' });
  expect(sub.status).toBe(201);
  const oldSecret = sub.body.data.secret as string;
  const secret = (await admin('POST', `/${sub.body.data.id}/rotate-secret`)).body.data.secret as string;
  const sample = await call(stack.url, 'POST', '/v1/samples', { token, body: { name: 'signed-standard' } });
  const delivery: Received = await eventually(() => receiver.requests.find((r) => r.body.data?.id === sample.body.data.id));
  const headers = JSON.stringify(delivery.headers);
  // prints the parsed event's id, or the error's name
  const verify = async (secrets: string[], h: string, body: Buffer) => {
    const out = await run(
      process.execPath,
      [
        '-e',
        `${snippet('javascript')}\ntry { process.stdout.write(verifyStandardWebhook(JSON.parse(process.env.SECRETS), JSON.parse(process.env.HEADER), require('node:fs').readFileSync(0)).id); } catch (e) { process.stdout.write(e.name); }`,
      ],
      secrets,
      h,
      body,
    );
    expect(out.stderr).toBe('');
    return out.stdout;
  };
  expect(await verify([secret], headers, delivery.raw)).toBe(delivery.body.id);
  expect(await verify([oldSecret], headers, delivery.raw)).toBe(delivery.body.id);
  expect(await verify([`whsec_${Buffer.alloc(32, 7).toString('base64')}`, secret], headers, delivery.raw)).toBe(delivery.body.id);
  expect(await verify([`whsec_${Buffer.alloc(32, 7).toString('base64')}`], headers, delivery.raw)).toBe('WebhookVerificationError');
  expect(await verify([secret], headers, Buffer.concat([delivery.raw, Buffer.from(' ')]))).toBe('WebhookVerificationError');
  const otherId = JSON.stringify({ ...delivery.headers, 'webhook-id': 'f'.repeat(8) });
  expect(await verify([secret], otherId, delivery.raw)).toBe('WebhookVerificationError');
});
