// vitest's asymmetric matchers (`expect.any`, `expect.stringMatching`) are typed `any`, which
// would make every expected object that holds one `any` too. These stand in for the value they
// match: a string, so the expected object keeps the type of the body it describes.
import { expect } from 'vitest';

/** Any string (`expect.any(String)`). */
export const anyString = (): string => expect.any(String) as string;

/** A string matching `pattern` (`expect.stringMatching`). */
export const stringMatching = (pattern: RegExp): string => expect.stringMatching(pattern) as string;
