import { storableTimestamp } from '@lab/kit';
import { createOrderBody, listOrdersQuery, listResultsQuery, recordResultBody } from '../src/bodies';

const SAMPLE_ID = '0190a5b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b';
const order = (over: Record<string, unknown> = {}) => ({ external_order_number: 'ORD-1', requester_name: 'Dr X', samples: [{ name: 'S-1' }], ...over });
const paths = (r: { success: boolean; error?: { issues: { path: PropertyKey[] }[] } }) => r.error?.issues.map((i) => i.path.join('.'));

describe('lab order bodies', () => {
  it('accepts a plain order, including characters outside the BMP', () => {
    expect(createOrderBody.safeParse(order({ samples: [{ name: 'S-\u{1F9EA}', metadata: { tube: '\u{1F9EA}' } }] })).success).toBe(true);
  });

  // JSON can carry "\ud800"; PostgreSQL cannot store it, so the notebook's sample insert
  // failed with a 500 after the order row was written (the order ended up `failed`)
  it.each([
    [{ external_order_number: 'ORD-\ud800' }, 'external_order_number'],
    [{ samples: [{ name: 'S-\udc00' }] }, 'samples.0.name'],
    [{ samples: [{ name: 'S', metadata: { deep: ['ok', 'x\ud800y'] } }] }, 'samples.0.metadata.deep.1'],
    [{ samples: [{ name: 'S', metadata: { ['k\udfff']: 1 } }] }, 'samples.0.metadata.k\udfff'],
    [{ notes: '\ud83d' }, 'notes'],
  ])('refuses an unpaired surrogate before anything is written: %j', (over, path) => {
    const r = createOrderBody.safeParse(order(over));
    expect(r.success).toBe(false);
    expect(paths(r)).toContain(path);
  });
});

describe('timestamps PostgreSQL cannot store', () => {
  it.each(['0000-01-01T00:00:00Z', '0001-01-01T00:30:00+01:00', '2024-01-01T00:00:00+16:00', '2024-01-01T00:00:00-23:00'])(
    'refuses %s (400, not a failed statement)',
    (t) => {
      expect(storableTimestamp(t)).toBe(false);
      expect(paths(recordResultBody.safeParse({ sample_id: SAMPLE_ID, analyte: 'Na', value: 1, measured_at: t }))).toEqual(['measured_at']);
      expect(paths(listResultsQuery(2000).safeParse({ since: t }))).toEqual(['since']);
    },
  );
  it.each(['0001-01-01T00:00:00Z', '2024-01-01T00:00:00+15:59', '2024-01-01T00:00:00.123456Z'])('accepts %s', (t) => {
    expect(recordResultBody.safeParse({ sample_id: SAMPLE_ID, analyte: 'Na', value: 1, measured_at: t }).success).toBe(true);
    expect(listResultsQuery(2000).safeParse({ since: t }).success).toBe(true);
  });
});

describe('paging offsets', () => {
  // the pagination of lab.orders.v1 is int32: a larger offset failed to serialise (500)
  it('refuses an offset beyond int32 and takes the largest one', () => {
    expect(paths(listOrdersQuery.safeParse({ offset: '2147483648' }))).toEqual(['offset']);
    expect(paths(listResultsQuery(2000).safeParse({ offset: '9007199254740991' }))).toEqual(['offset']);
    expect(listOrdersQuery.safeParse({ offset: '2147483647' }).success).toBe(true);
    expect(listResultsQuery(2000).safeParse({ offset: '2147483647' }).success).toBe(true);
  });
});
