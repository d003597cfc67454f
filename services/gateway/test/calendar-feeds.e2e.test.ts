import ical, { type CalendarResponse, type VEvent } from 'node-ical';
import { startStack, type Stack } from '@lab/testing';
import { waitFor } from '@lab/testing/waits';
import { FEED_LIMITS } from '../src/handlers/calendar';
import { call } from './http';

/**
 * Calendar feeds of equipment (decision 060), through the gateway: feed tokens
 * made, listed and revoked with a user's token; the feed read by URL alone and
 * parsed with an iCalendar parser (node-ical), as a calendar client reads it.
 */
let stack: Stack;
let orgId: string;
let otherOrgId: string;
let adminKey: string;
let otherKey: string;
let userId: string;
/** a researcher of department A, with a token of the read scope only */
let pat: string;
let deptA: string;
let deptB: string;

const api = (method: string, path: string, token: string, body?: unknown) => call(stack.url, method, path, { token, body });

beforeAll(async () => {
  stack = await startStack({ services: ['identity', 'audit', 'equipment'] });
  const { admin } = stack;
  const org = await admin.createOrg({ modules: ['lab_equipment'] });
  orgId = org.id;
  const other = await admin.createOrg({ modules: ['lab_equipment'] });
  otherOrgId = other.id;
  adminKey = (await admin.createApiKey(org.id, { scopes: ['read', 'write'] })).token;
  otherKey = (await admin.createApiKey(other.id, { scopes: ['read', 'write'] })).token;
  deptA = (await admin.call<{ id: string }>('POST', `/orgs/${org.id}/departments`, { name: 'A' }, 201)).id;
  deptB = (await admin.call<{ id: string }>('POST', `/orgs/${org.id}/departments`, { name: 'B' }, 201)).id;
  const user = await admin.createUser();
  userId = user.id;
  await admin.putMember(org.id, user.id, 'researcher', deptA);
  pat = (await admin.createPat(user.id, { scopes: ['read'], org_id: org.id })).token;
});

afterAll(async () => {
  await stack?.stop();
});

const created = async (path: string, body: unknown, token = adminKey) => {
  const r = await api('POST', path, token, body);
  expect([path, r.status]).toEqual([path, 201]);
  return r.body.data as { id: string; updated_at: string } & Record<string, unknown>;
};

/** What a calendar client does: GET the URL, no headers. */
const fetchFeed = (url: string) => call(stack.url, 'GET', new URL(url).pathname);

async function events(url: string): Promise<{ text: string; byUid: Map<string, VEvent>; uids: string[] }> {
  const r = await fetchFeed(url);
  expect(r.status).toBe(200);
  expect(r.headers.get('content-type')).toBe('text/calendar; charset=utf-8');
  const parsed: CalendarResponse = ical.sync.parseICS(r.text);
  const vevents = Object.values(parsed).filter((c): c is VEvent => c?.type === 'VEVENT');
  // every VEVENT once: the raw text (its folded lines joined) agrees with the parser on how many there are
  const unfolded = r.text.replace(/\r\n[ \t]/g, '');
  const uids = [...unfolded.matchAll(/^UID:(.*)\r$/gm)].map((m) => m[1]!);
  expect(uids.length).toBe(vevents.length);
  return { text: r.text, byUid: new Map(vevents.map((e) => [e.uid, e])), uids };
}

const newFeed = async (body: Record<string, unknown> = {}, token = pat) => {
  const r = await api('POST', '/v1/calendar-feeds', token, body);
  expect(r.status).toBe(201);
  return r.body.data as { id: string; url: string; token: string; equipment_id: string | null };
};

/** SEQUENCE and LAST-MODIFIED count seconds: a change made in the same second as the last is not told apart. */
const nextSecond = (updatedAt: string) =>
  waitFor('the clock past the second of the last change', async () => (Date.now() >= Date.parse(updatedAt) + 1000 ? true : undefined), {
    timeoutMs: 5_000,
    intervalMs: 50,
  });

describe('calendar feeds of equipment', () => {
  let hplc: string;
  let hidden: string;
  let session: { id: string; started_at: string; ended_at: string };
  let log: { id: string; updated_at: string };
  let planned: { id: string };
  let calibration: { id: string };
  const longName = 'Ultrazentrifuge Größe XL; Raum 4, Kühlung "aus" — mit einem Namen, der länger ist als eine iCalendar-Zeile';

  beforeAll(async () => {
    hplc = (await created('/v1/equipment', { name: longName, department_id: deptA, next_maintenance_date: '2027-03-01' })).id;
    hidden = (await created('/v1/equipment', { name: 'Department B balance', department_id: deptB })).id;
    const s = await created(`/v1/equipment/${hplc}/usage`, {
      started_at: '2026-11-20T09:15:00+01:00',
      ended_at: '2026-11-20T10:45:30Z',
      purpose: 'gradient run',
    });
    session = { id: s.id, started_at: '2026-11-20T08:15:00Z', ended_at: '2026-11-20T10:45:30Z' };
    log = await created(`/v1/equipment/${hplc}/maintenance`, { maintenance_type: 'repair', completed_date: '2026-11-10', description: 'pump seal' });
    planned = await created(`/v1/equipment/${hplc}/maintenance`, { maintenance_type: 'inspection', scheduled_date: '2026-12-05' });
    await created(`/v1/equipment/${hplc}/calibrations`, { calibration_date: '2026-01-15', next_calibration_date: '2026-07-15' });
    calibration = await created(`/v1/equipment/${hplc}/calibrations`, { calibration_date: '2026-11-15', next_calibration_date: '2027-05-15' });
    await created(`/v1/equipment/${hidden}/usage`, { started_at: '2026-11-21T08:00:00Z', ended_at: '2026-11-21T09:00:00Z' });
  });

  it('shows usage in UTC, logs and due dates as all-day events, under stable UIDs, as the creator may see them', async () => {
    const feed = await newFeed({ name: 'Lab A' });
    expect(feed.url).toMatch(/^http:\/\/[^/]+\/v1\/calendar\/cal_[0-9a-f]{32}_[A-Za-z0-9_-]{43}\.ics$/);
    const { text, byUid } = await events(feed.url);

    const usage = byUid.get(`usage-${session.id}@equipment.lab-notebook`)!;
    expect(usage.start.toISOString()).toBe('2026-11-20T08:15:00.000Z');
    expect(usage.end.toISOString()).toBe('2026-11-20T10:45:30.000Z');
    expect(text).toContain('DTSTART:20261120T081500Z');
    expect(usage.summary).toBe(`${longName}: in use`);
    expect(usage.description).toBe('gradient run');

    const repair = byUid.get(`maintenance-${log.id}@equipment.lab-notebook`)!;
    expect(repair.start.dateOnly).toBe(true);
    expect(repair.summary).toBe(`${longName}: repair maintenance`);
    expect(text).toContain('DTSTART;VALUE=DATE:20261110');
    expect(byUid.get(`maintenance-${planned.id}@equipment.lab-notebook`)!.summary).toBe(`${longName}: inspection maintenance (scheduled)`);
    expect(text).toContain('DTSTART;VALUE=DATE:20261205');

    // the due dates in force: the equipment's next maintenance (which the completed repair left as it was), the latest calibration's
    expect(byUid.get(`maintenance-due-${hplc}@equipment.lab-notebook`)!.start.dateOnly).toBe(true);
    expect(text).toContain('DTSTART;VALUE=DATE:20270301');
    expect(byUid.get(`calibration-due-${calibration.id}@equipment.lab-notebook`)!.summary).toBe(`${longName}: calibration due`);
    expect(text).toContain('DTSTART;VALUE=DATE:20270515');
    expect(text).not.toContain('20260715');
    expect(byUid.get(`calibration-${calibration.id}@equipment.lab-notebook`)).toBeDefined();

    // the department B item is not the researcher's to see
    expect([...byUid.values()].some((e) => e.summary.startsWith('Department B'))).toBe(false);

    // RFC 5545: CRLF lines of at most 75 octets, folded (the long name with commas, semicolons, umlauts comes back whole)
    for (const line of text.split('\r\n')) expect(Buffer.byteLength(line)).toBeLessThanOrEqual(75);
    expect(text).toContain('\\;');
    expect(text).toMatch(/^BEGIN:VCALENDAR\r\nVERSION:2\.0\r\n/);
    expect(text).toContain('REFRESH-INTERVAL;VALUE=DURATION:PT15M\r\n');
  });

  it('keeps the UID of a changed record, with a higher SEQUENCE and a new LAST-MODIFIED, and no duplicate', async () => {
    const feed = await newFeed();
    const uid = `maintenance-${log.id}@equipment.lab-notebook`;
    const before = (await events(feed.url)).byUid.get(uid)!;
    const current = await api('GET', `/v1/equipment/${hplc}/maintenance`, adminKey);
    await nextSecond((current.body.data as { id: string; updated_at: string }[]).find((m) => m.id === log.id)!.updated_at);

    const patched = await api('PATCH', `/v1/equipment/${hplc}/maintenance/${log.id}`, adminKey, { description: 'pump seal and check valve' });
    expect(patched.status).toBe(200);
    const after = await events(feed.url);
    const changed = after.byUid.get(uid)!;
    expect(changed.description).toBe('pump seal and check valve');
    expect(Number(changed.sequence)).toBeGreaterThan(Number(before.sequence));
    expect(changed.lastmodified!.getTime()).toBeGreaterThan(before.lastmodified!.getTime());
    expect(after.uids.filter((u) => u === uid)).toHaveLength(1);
    expect(new Set(after.uids).size).toBe(after.uids.length);
  });

  it('shows only its item in a feed of one item', async () => {
    const other = (await created('/v1/equipment', { name: 'Spectrometer' })).id;
    await created(`/v1/equipment/${other}/usage`, { started_at: '2026-11-22T08:00:00Z', ended_at: '2026-11-22T09:00:00Z' });
    const feed = await newFeed({ equipment_id: other });
    expect(feed.equipment_id).toBe(other);
    const { byUid } = await events(feed.url);
    expect(byUid.size).toBeGreaterThan(0);
    for (const e of byUid.values()) expect(e.summary).toMatch(/^Spectrometer: /);
  });

  it("refuses a feed of another organisation's item or of an item the creator cannot see; another organisation's feed shows none of this one", async () => {
    const theirs = (await created('/v1/equipment', { name: 'Their incubator' }, otherKey)).id;
    await created(`/v1/equipment/${theirs}/usage`, { started_at: '2026-11-22T08:00:00Z', ended_at: '2026-11-22T09:00:00Z' }, otherKey);
    for (const equipment_id of [theirs, hidden]) {
      const r = await api('POST', '/v1/calendar-feeds', pat, { equipment_id });
      expect(r.status).toBe(404);
    }
    const theirUser = await stack.admin.createUser();
    await stack.admin.putMember(otherOrgId, theirUser.id, 'admin');
    const theirPat = (await stack.admin.createPat(theirUser.id, { scopes: ['read'], org_id: otherOrgId })).token;
    const theirFeed = await newFeed({ equipment_id: theirs }, theirPat);
    const { byUid } = await events(theirFeed.url);
    expect([...byUid.values()].map((e) => e.summary)).toEqual(['Their incubator: in use']);
    // their feed's token is no way into this organisation: not a bearer token, and not a feed of ours
    expect((await api('GET', '/v1/equipment', theirFeed.token)).status).toBe(401);
    expect((await api('DELETE', `/v1/calendar-feeds/${theirFeed.id}`, pat)).status).toBe(404);
    expect((await fetchFeed(theirFeed.url)).status).toBe(200);
  });

  it('answers 404 for a malformed or unknown token, and for a known id with a wrong secret', async () => {
    const feed = await newFeed();
    const wrongSecret = feed.url.replace(/_[A-Za-z0-9_-]{43}\.ics$/, `_${'A'.repeat(43)}.ics`);
    for (const url of [wrongSecret, `${stack.url}/v1/calendar/nothing.ics`, feed.url.replace(/\.ics$/, '')]) {
      const r = await fetchFeed(url);
      expect([url, r.status, r.body.error.code]).toEqual([url, 404, 'not_found']);
    }
  });

  it('counts the fetches of a feed like an anonymous door: a feed polled in a loop gets 429 with Retry-After', async () => {
    const feed = await newFeed();
    // the limit is per minute: twice it, and one more, reach it even across the turn of a minute
    let refused: Awaited<ReturnType<typeof fetchFeed>> | undefined;
    for (let i = 0; i < 2 * FEED_LIMITS.per_minute + 1 && !refused; i++) {
      const r = await fetchFeed(feed.url);
      if (r.status === 429) refused = r;
      else expect(r.status).toBe(200);
    }
    expect(refused?.headers.get('retry-after')).toBe('60');
    expect(refused?.body.error.code).toBe('rate_limited');
  });

  it('lists the caller’s feeds without their tokens, and a revoked feed answers 404', async () => {
    const feed = await newFeed({ name: 'to revoke' });
    const listed = await api('GET', '/v1/calendar-feeds', pat);
    expect(listed.status).toBe(200);
    const mine = (listed.body.data as Record<string, unknown>[]).find((f) => f.id === feed.id)!;
    expect(mine).toMatchObject({ name: 'to revoke', created_by: userId, equipment_id: null });
    expect(JSON.stringify(listed.body)).not.toContain(feed.token);
    expect((await fetchFeed(feed.url)).status).toBe(200);

    expect((await api('DELETE', `/v1/calendar-feeds/${feed.id}`, pat)).status).toBe(204);
    expect((await fetchFeed(feed.url)).status).toBe(404);
    expect((await api('DELETE', `/v1/calendar-feeds/${feed.id}`, pat)).status).toBe(404);
    const after = await api('GET', '/v1/calendar-feeds', pat);
    expect((after.body.data as { id: string }[]).some((f) => f.id === feed.id)).toBe(false);
  });

  it('is made by a user: an API key without one is refused', async () => {
    const r = await api('POST', '/v1/calendar-feeds', adminKey, {});
    expect(r.status).toBe(403);
    expect(r.body.error.code).toBe('user_required');
    const bad = await api('POST', '/v1/calendar-feeds', pat, { equipment_id: 'nope', colour: 'red' });
    expect(bad.status).toBe(400);
  });

  it('stops when its creator loses sight of the item, and when the creator leaves the organisation', async () => {
    const own = await newFeed({ equipment_id: hplc });
    const all = await newFeed();
    expect((await fetchFeed(own.url)).status).toBe(200);

    // moved to department B: the department A item is out of sight, the department B one in it
    await stack.admin.putMember(orgId, userId, 'researcher', deptB);
    expect((await fetchFeed(own.url)).status).toBe(404);
    const seen = await events(all.url);
    expect([...seen.byUid.values()].some((e) => e.summary.startsWith('Department B'))).toBe(true);
    expect([...seen.byUid.values()].some((e) => e.summary.startsWith(longName))).toBe(false);

    await stack.admin.call('DELETE', `/orgs/${orgId}/members/${userId}`, undefined, 204);
    expect((await fetchFeed(all.url)).status).toBe(404);
    expect((await fetchFeed(own.url)).status).toBe(404);
  });
});
