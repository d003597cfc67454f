import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PUBLIC_EVENT_PREFIXES } from '@lab/contracts';
import { createSubscriptionBody } from '../src/management';
import {
  EVENTS_BLOCK_END,
  EVENTS_BLOCK_START,
  eventsMarkdown,
  filterMatches,
  isValidFilter,
  SUBSCRIBABLE_EVENTS,
  SUBSCRIBABLE_WILDCARDS,
} from '../src/event-filters';

const root = join(__dirname, '..', '..', '..');

/** Every event name a service emits with a literal `emit.event('<name>'` or `emit.eventsJson('<name>'` (a batch's events), or as the first argument on the next line. */
function emittedEvents(): Set<string> {
  const names = new Set<string>();
  for (const service of readdirSync(join(root, 'services'))) {
    let files: string[];
    try {
      files = readdirSync(join(root, 'services', service, 'src'), { recursive: true }) as string[];
    } catch {
      continue;
    }
    for (const f of files.filter((x) => x.endsWith('.ts'))) {
      const text = readFileSync(join(root, 'services', service, 'src', f), 'utf8');
      for (const m of text.matchAll(/emit\.event(?:sJson)?\(\s*'([a-z_]+(?:\.[a-z_]+)+)'/g)) names.add(m[1]!);
    }
  }
  return names;
}

describe('the one list of subscribable events', () => {
  test('holds every public event a service emits, and each of its events has a public prefix', () => {
    const publicEmitted = [...emittedEvents()].filter((e) => PUBLIC_EVENT_PREFIXES.some((p) => e.startsWith(`${p}.`)));
    // the scan must see the services at all, or this test could not fail
    expect(publicEmitted).toEqual(expect.arrayContaining(['experiment.created', 'lab_order.created', 'environmental.breach']));
    for (const e of publicEmitted) expect([e, SUBSCRIBABLE_EVENTS.includes(e)]).toEqual([e, true]);
    for (const e of SUBSCRIBABLE_EVENTS) expect([e, PUBLIC_EVENT_PREFIXES.some((p) => e.startsWith(`${p}.`))]).toEqual([e, true]);
  });

  test('the README lists exactly the code’s events and filters', () => {
    const readme = readFileSync(join(root, 'README.md'), 'utf8');
    const start = readme.indexOf(EVENTS_BLOCK_START);
    const end = readme.indexOf(EVENTS_BLOCK_END);
    expect(start).toBeGreaterThan(-1);
    expect(end).toBeGreaterThan(start);
    // when this fails, paste eventsMarkdown() between the markers
    expect(readme.slice(start, end + EVENTS_BLOCK_END.length)).toBe(eventsMarkdown());
  });

  test('lab_order.created and lab_result.released can be subscribed to, by name and by their wildcard', () => {
    for (const f of ['lab_order.created', 'lab_result.released', 'lab_order.*', 'lab_result.*', 'stock_item.*', 'environmental.*']) {
      expect([f, isValidFilter(f)]).toEqual([f, true]);
    }
    expect(filterMatches('lab_result.*', 'lab_result.released')).toBe(true);
    expect(filterMatches('*', 'lab_order.created')).toBe(true);
  });

  test('names no event is published as refused, and the refusal lists every event and filter', () => {
    expect(isValidFilter('experiment.deleted')).toBe(false);
    const r = createSubscriptionBody.safeParse({ org_id: '0190a0c8-0000-7000-8000-000000000001', url: 'https://x.example/', events: ['lab_order.deleted'] });
    expect(r.success).toBe(false);
    const message = r.error!.issues[0]!.message;
    for (const f of [...SUBSCRIBABLE_EVENTS, ...SUBSCRIBABLE_WILDCARDS]) expect(message).toContain(f);
  });
});
