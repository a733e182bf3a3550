// Device topics and names (default and legacy layout) and the config topics actuation publishes to.
import { describe, expect, it } from 'vitest';
import { configTopics, parseDeviceName, parseDeviceTopic } from '../../src/topics.js';

describe('topics', () => {
  it.each([
    ['acme:4f2a1c/attrs', { tenant: 'acme', id: '4f2a1c', kind: 'attrs', legacy: false }],
    ['acme:4f2a1c/config', { tenant: 'acme', id: '4f2a1c', kind: 'config', legacy: false }],
    ['/acme/4f2a1c/attrs', { tenant: 'acme', id: '4f2a1c', kind: 'attrs', legacy: true }],
    ['/acme/4f2a1c/config', { tenant: 'acme', id: '4f2a1c', kind: 'config', legacy: true }],
    ['a:b:c/attrs', { tenant: 'a:b', id: 'c', kind: 'attrs', legacy: false }],
  ])('%s', (topic, expected) => {
    expect(parseDeviceTopic(topic)).toEqual(expected);
  });

  it.each([
    'acme/4f2a1c/attrs',
    'acme:4f2a1c',
    'acme:4f2a1c/other',
    ':x/attrs',
    'acme:/attrs',
    '/acme/attrs',
    '/acme/x/y/attrs',
    'acme:+/attrs',
    '//x/attrs',
    'a:b/attrs/x',
  ])('not a device topic: %s', (topic) => {
    expect(parseDeviceTopic(topic)).toBeUndefined();
  });

  it('device names and config topics', () => {
    expect(parseDeviceName('t1:abc')).toEqual({ tenant: 't1', id: 'abc' });
    expect(parseDeviceName('abc')).toBeUndefined();
    expect(parseDeviceName('t1:')).toBeUndefined();
    expect(configTopics('t1', 'abc')).toEqual(['t1:abc/config', '/t1/abc/config']);
  });
});
