// `npm run openapi`: writes docs/openapi.json, the document the service serves with the default
// configuration (a test checks that the committed file is up to date).
import fs from 'node:fs';
import path from 'node:path';
import { apiRoutes } from './api.js';
import { readConfig } from './config.js';
import { openApiText } from './openapi/document.js';
import { projectRoot } from './paths.js';

const target = path.join(projectRoot, 'docs/openapi.json');
fs.writeFileSync(target, openApiText(apiRoutes, readConfig({})));
console.log(`wrote ${path.relative(process.cwd(), target) || target}`);
