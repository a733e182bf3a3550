// The value rules of device messages (a value must fit its attribute's value_type) and the
// accepted forms of a message's timestamp.
import { describe, expect, it } from 'vitest';
import { converterFor } from '../../src/ingest/values.js';
import { microsToText, parseTimestamp } from '../../src/time.js';

describe('value rules', () => {
  it.each([
    ['float', 1.5, '1.5'],
    ['float', '2.25', '2.25'],
    ['float', ' 3 ', '3'],
    ['float', '1e3', '1000'],
    ['float', 'abc', undefined],
    ['float', '', undefined],
    ['float', true, undefined],
    ['float', null, undefined],
    ['integer', 4, '4'],
    ['integer', '5', '5'],
    ['integer', 4.5, undefined],
    ['integer', '4.5', undefined],
    ['bool', true, 'true'],
    ['bool', 'true', undefined],
    ['bool', 0, undefined],
    ['string', 'x"y', '"x\\"y"'],
    ['string', 5, undefined],
    ['geopoint', '-22.8,-47.1', '"-22.8,-47.1"'],
    ['geopoint', '95,0', undefined],
    ['geopoint', '0,181', undefined],
    ['geopoint', '1;2', undefined],
    ['object', { a: [1] }, '{"a":[1]}'],
    ['psk', 'anything', '"anything"'],
    ['whatever', null, 'null'],
  ])('%s %j -> %s', (type, value, expected) => {
    expect(converterFor(type)(value)).toBe(expected);
  });

  it('timestamps: epoch ms, ISO 8601 with or without zone and fraction, nothing else', () => {
    expect(parseTimestamp(1714564800000)).toBe(1714564800000 * 1000);
    expect(parseTimestamp('1714564800000')).toBe(1714564800000 * 1000);
    expect(parseTimestamp('2024-05-01T12:00:00Z')).toBe(Date.UTC(2024, 4, 1, 12) * 1000);
    expect(parseTimestamp('2024-05-01T12:00:00')).toBe(Date.UTC(2024, 4, 1, 12) * 1000);
    expect(parseTimestamp('2024-05-01T14:00:00.000123+02:00')).toBe(Date.UTC(2024, 4, 1, 12) * 1000 + 123);
    expect(parseTimestamp('2024-05-01')).toBe(Date.UTC(2024, 4, 1) * 1000);
    // ISO 8601 sets no limit on the fraction's digits: past the microsecond they are cut off
    // (they were a bad timestamp from the tenth digit on; found by an audit)
    expect(parseTimestamp('2024-05-01T12:00:00.1234567891Z')).toBe(Date.UTC(2024, 4, 1, 12) * 1000 + 123456);
    expect(parseTimestamp('2024-05-01T12:00:00.00000099999999999999Z')).toBe(Date.UTC(2024, 4, 1, 12) * 1000);
    for (const bad of ['2024-02-30T00:00:00Z', '2024-05-01T25:00:00Z', 'now', -1, Infinity, true, '2024-05-01T12:00:00+25:00', 1e20]) {
      expect(parseTimestamp(bad)).toBeUndefined();
    }
    expect(microsToText(Date.UTC(2024, 0, 2, 3, 4, 5, 678) * 1000 + 9)).toBe('2024-01-02T03:04:05.678009Z');
  });
});
