import { timestampFromText, timestampText } from '@lab/contracts';

/**
 * The timestamp codec of typed records reads and writes digits by hand (it runs
 * twice per record of every answer); here it is held to what Date makes of the
 * same instants, over random ones from year 1 to 9999 and the calendar's corners.
 */
const reference = (seconds: number, micros: number): string => {
  const whole = new Date(seconds * 1000).toISOString().slice(0, 19);
  return micros ? `${whole}.${String(micros).padStart(6, '0').replace(/0+$/, '')}+00:00` : `${whole}+00:00`;
};

const MIN = Date.UTC(1, 0, 1) / 1000;
const MAX = Date.UTC(9999, 11, 31, 23, 59, 59) / 1000;
const corners = [
  '1970-01-01T00:00:00',
  '1969-12-31T23:59:59',
  '2000-02-29T12:00:00',
  '1900-03-01T00:00:00',
  '2024-12-31T23:59:59',
  '0001-01-01T00:00:00',
  '9999-12-31T23:59:59',
];

describe('timestamp text', () => {
  it('writes and reads back random instants exactly as Date does', () => {
    let seed = 20261126;
    const random = () => (seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    const instants = corners.map((c) => Date.parse(`${c}Z`) / 1000);
    for (let i = 0; i < 20_000; i++) instants.push(Math.floor(MIN + random() * (MAX - MIN)));
    for (const [i, seconds] of instants.entries()) {
      const micros = i % 3 === 0 ? 0 : Math.floor(random() * 1_000_000);
      const text = timestampText({ seconds, nanos: micros * 1000 + (i % 7) });
      expect(text).toBe(reference(seconds, micros));
      expect(timestampFromText(text)).toEqual({ seconds, nanos: micros * 1000 });
    }
  });

  it('reads other offsets, Z and nanoseconds, and refuses what is not a timestamp', () => {
    expect(timestampFromText('2026-01-01T12:00:00+02:00')).toEqual({ seconds: 1767261600, nanos: 0 });
    expect(timestampFromText('2026-01-01T10:00:00Z')).toEqual({ seconds: 1767261600, nanos: 0 });
    expect(timestampFromText('2026-01-01T10:00:00.123456789+00:00')).toEqual({ seconds: 1767261600, nanos: 123456789 });
    for (const bad of ['2026-01-01', '2026-13-01T00:00:00+00:00', '2026-01-01T10:00:00.+00:00', 'x026-01-01T10:00:00+00:00']) {
      expect(() => timestampFromText(bad)).toThrow('not a timestamp');
    }
  });
});
