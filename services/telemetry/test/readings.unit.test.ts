import { storableTimestamp } from '@lab/kit';
import { pgFloat } from '@lab/contracts';
import { batchIdBase, item, quickItem } from '../src/readings';

const ID = '0190a5b2-7c3d-7e4f-8a9b-0c1d2e3f4a5b';

describe('the ingest fast path', () => {
  // Every input either passes both checks with the same value, or the fast path
  // declines it (and zod decides, with its message).
  const inputs: unknown[] = [
    { point_id: ID, value: 1 },
    { point_id: ID.toUpperCase(), value: -0.5 },
    { external_code: '  R-1 ', value: 0 },
    { external_code: '', value: 1 },
    { external_code: '   ', value: 1 },
    { external_code: 'x'.repeat(100), value: 1 },
    { external_code: 'x'.repeat(101), value: 1 },
    { external_code: ' ' + 'x'.repeat(100) + ' ', value: 1 },
    { external_code: 'A', value: 1, unit: ' °C ' },
    { external_code: 'A', value: 1, unit: 'u'.repeat(33) },
    { external_code: 'A', value: 1, unit: '' },
    { external_code: 'A', value: 1, unit: null },
    { external_code: 'A', value: '1' },
    { external_code: 'A', value: Number.NaN },
    { external_code: 'A', value: Infinity },
    { external_code: 'A' },
    { value: 1 },
    { point_id: 'not-a-uuid', value: 1 },
    { point_id: ID, external_code: 'A', value: 1 },
    { external_code: 'A', value: 1, measured_at: '2024-01-01T10:00:00Z' },
    { external_code: 'A', value: 1, measured_at: '2024-01-01T10:00:00.123456+01:00' },
    { external_code: 'A', value: 1, measured_at: '2024-01-01T10:00:00' },
    { external_code: 'A', value: 1, measured_at: '2024-13-01T10:00:00Z' },
    { external_code: 'A', value: 1, measured_at: 1 },
    { external_code: 'A', value: 1, measured_at: '0000-01-01T00:00:00Z' },
    { external_code: 'A', value: 1, measured_at: '2024-01-01T10:00:00+23:00' },
    { external_code: 'A', value: 1, sample_id: ID.toUpperCase() },
    { external_code: 'A', value: 1, sample_id: 'x' },
    { external_code: 'A', value: 1, notes: '' },
    { external_code: 'A', value: 1, notes: 'n'.repeat(2000) },
    { external_code: 'A', value: 1, notes: 'n'.repeat(2001) },
    { external_code: 'A', value: 1, notes: 5 },
    { external_code: 'A', value: 1, extra: true },
    { external_code: 'A', value: 1, point_id: undefined },
    JSON.parse('{"external_code":"A","value":1,"__proto__":{"x":1}}'),
    null,
    [],
    'reading',
    7,
  ];

  it.each(inputs.map((i) => [JSON.stringify(i) ?? String(i), i]))('agrees with the schema: %s', (_, input) => {
    const fast = quickItem(input);
    const slow = item.safeParse(input);
    if (fast !== undefined) {
      expect(slow.success).toBe(true);
      expect(fast).toEqual(slow.data);
    }
  });

  it('takes the common items without zod', () => {
    expect(quickItem({ external_code: 'R-1', value: 4.5 })).toEqual({ external_code: 'R-1', value: 4.5 });
    expect(quickItem({ point_id: ID.toUpperCase(), value: 1, unit: ' K ', measured_at: '2024-01-01T10:00:00Z', sample_id: ID, notes: 'n' })).toEqual({
      point_id: ID,
      value: 1,
      unit: 'K',
      measured_at: '2024-01-01T10:00:00Z',
      sample_id: ID,
      notes: 'n',
    });
  });
});

describe('timestamps PostgreSQL cannot store', () => {
  // year 0000 and offsets of 16 hours or more pass zod's ISO format but make
  // timestamptz fail ("out of range"): they must be a validation error, not a 500
  it.each(['0000-01-01T00:00:00Z', '0000-12-31T23:59:59.999Z', '0001-01-01T00:30:00+01:00', '2024-06-01T10:00:00+16:00', '2024-06-01T10:00:00-23:59'])(
    'refuses %s',
    (measured_at) => {
      expect(storableTimestamp(measured_at)).toBe(false);
      expect(quickItem({ external_code: 'A', value: 1, measured_at })).toBeUndefined();
      const r = item.safeParse({ external_code: 'A', value: 1, measured_at });
      expect(r.success).toBe(false);
      expect(r.error?.issues[0]?.path).toEqual(['measured_at']);
    },
  );
  it.each(['0001-01-01T00:00:00Z', '2024-06-01T10:00:00+15:59', '2024-06-01T10:00:00-15:59', '9999-12-31T23:59:59.999999Z'])('accepts %s', (measured_at) => {
    expect(storableTimestamp(measured_at)).toBe(true);
    expect(item.safeParse({ external_code: 'A', value: 1, measured_at }).success).toBe(true);
  });
});

describe('pgFloat', () => {
  it('writes doubles as PostgreSQL float8 output does', () => {
    const cases: [number, string][] = [
      [0, '0'],
      [-0, '-0'],
      [4.333333333333333, '4.333333333333333'],
      [0.0001, '0.0001'],
      [0.00001, '1e-05'],
      [-2e-5, '-2e-05'],
      [123456789012345.6, '123456789012345.6'],
      [1e15, '1e+15'],
      [1e300, '1e+300'],
      [5e-324, '5e-324'],
    ];
    for (const [x, text] of cases) expect(pgFloat(x)).toBe(text);
  });
});

describe('batchIdBase', () => {
  it('gives UUIDv7 prefixes that increase batch after batch', () => {
    const bases = Array.from({ length: 5000 }, () => batchIdBase());
    for (const b of bases) expect(`${b}0000`).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    expect([...bases].sort()).toEqual(bases);
    expect(new Set(bases).size).toBe(bases.length);
  });
});
