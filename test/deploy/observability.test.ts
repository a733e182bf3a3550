// The compose stack's observability (deploy/prometheus, deploy/grafana): the files parse and are
// wired to each other and to the compose file; the dashboard shows what an operator looks at
// first and the rules alert on what matters; and every metric they use is in /metrics after a
// short ingest, with live figures. Every metric of /metrics is described in docs/operations.md,
// named by Prometheus conventions.
import crypto from 'node:crypto';
import { parse } from 'yaml';
import { beforeAll, describe, expect, it } from 'vitest';
import { createDevices, createTemplate } from '../helpers/registry-api.js';
import { deviceClient, eventually } from '../helpers/registry-fixtures.js';
import { http, tenantToken, useService } from '../helpers/service.js';
import { readRepoFile, yamlBlock, yamlList } from './files.js';

interface Target {
  expr: string;
  datasource: { uid: string };
}
interface Panel {
  title: string;
  description: string;
  type: string;
  datasource: { type: string; uid: string };
  targets: Target[];
  gridPos: { x: number; y: number; w: number; h: number };
}
interface Rule {
  alert: string;
  expr: string;
  for: string;
  labels: { severity: string };
  annotations: { summary: string; description: string };
}

const compose = readRepoFile('docker-compose.yml');
const prometheus = parse(readRepoFile('deploy/prometheus/prometheus.yml')) as {
  rule_files: string[];
  scrape_configs: Array<{ job_name: string; metrics_path: string; static_configs: Array<{ targets: string[] }> }>;
};
const rules = (parse(readRepoFile('deploy/prometheus/alerts.yml')) as { groups: Array<{ name: string; rules: Rule[] }> }).groups.flatMap(
  (g) => g.rules,
);
const datasources = parse(readRepoFile('deploy/grafana/provisioning/datasources/prometheus.yml')) as {
  datasources: Array<{ uid: string; type: string; url: string }>;
};
const providers = parse(readRepoFile('deploy/grafana/provisioning/dashboards/device-registry.yml')) as {
  providers: Array<{ options: { path: string } }>;
};
const dashboard = JSON.parse(readRepoFile('deploy/grafana/dashboards/device-registry.json')) as {
  uid: string;
  title: string;
  panels: Panel[];
};
const panels = dashboard.panels;
const expressions = [...panels.flatMap((p) => p.targets.map((t) => t.expr)), ...rules.map((r) => r.expr)];

/** PromQL words that are not metric names. */
const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'by', 'without', 'on', 'ignoring', 'group_left', 'group_right']);

/** The metric names a PromQL expression reads (strings, label matchers, ranges and grouping lists aside; a name followed by `(` is a function). */
export function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, ' ')
    .replace(/\[[^\]]*\]/g, ' ')
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' ');
  const names = new Set<string>();
  for (const m of bare.matchAll(/[A-Za-z_:][A-Za-z0-9_:]*/g)) {
    const rest = bare.slice(m.index + m[0].length);
    if (/^\s*\(/.test(rest) || KEYWORDS.has(m[0]) || /^\d/.test(m[0])) continue;
    names.add(m[0]);
  }
  return [...names];
}

/** `name{label="value"}` equality matchers of an expression. */
function matchers(expr: string): Array<{ name: string; label: string; value: string }> {
  const out: Array<{ name: string; label: string; value: string }> = [];
  for (const m of expr.matchAll(/([A-Za-z_:][A-Za-z0-9_:]*)\{([^}]*)\}/g)) {
    for (const l of m[2]!.matchAll(/([A-Za-z_]+)="([^"]*)"/g)) out.push({ name: m[1]!, label: l[1]!, value: l[2]! });
  }
  return out;
}

/** Metric families of a scrape: name -> type. */
function families(text: string): Map<string, string> {
  return new Map([...text.matchAll(/^# TYPE (\S+) (\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
}

function exists(name: string, fams: Map<string, string>): boolean {
  if (fams.has(name)) return true;
  const base = name.replace(/_(bucket|sum|count)$/, '');
  return base !== name && fams.get(base) === 'histogram';
}

const sample = (text: string, name: string) => Number(new RegExp(`^${name} (\\S+)$`, 'm').exec(text)?.[1] ?? NaN);

describe('the files and their wiring', () => {
  it('compose runs Prometheus with deploy/prometheus and Grafana with deploy/grafana on port 3000, admin password from .env', () => {
    expect(yamlList(yamlBlock(compose, ['services', 'prometheus', 'volumes']))).toContain('./deploy/prometheus:/etc/prometheus:ro');
    const grafanaVolumes = yamlList(yamlBlock(compose, ['services', 'grafana', 'volumes']));
    expect(grafanaVolumes).toEqual(
      expect.arrayContaining([
        './deploy/grafana/provisioning:/etc/grafana/provisioning:ro',
        './deploy/grafana/dashboards:/var/lib/grafana/dashboards:ro',
      ]),
    );
    expect(yamlList(yamlBlock(compose, ['services', 'grafana', 'ports']))).toEqual(['${GRAFANA_PUBLISH_PORT:-3000}:3000']);
    expect(compose).toMatch(/GF_SECURITY_ADMIN_PASSWORD: \$\{GRAFANA_ADMIN_PASSWORD:\?[^}]+\}/);
    // Prometheus only on loopback: it has no authentication.
    expect(yamlList(yamlBlock(compose, ['services', 'prometheus', 'ports']))).toEqual(['127.0.0.1:${PROMETHEUS_PUBLISH_PORT:-9090}:9090']);
  });

  it('Prometheus scrapes the internal listener on the compose network and loads the rules file', () => {
    const [job] = prometheus.scrape_configs;
    expect(job!.metrics_path).toBe('/metrics');
    const internalPort = /INTERNAL_PORT: "(\d+)"/.exec(compose)![1];
    expect(job!.static_configs[0]!.targets).toEqual([`device-registry:${internalPort}`]);
    // /etc/prometheus is deploy/prometheus.
    expect(prometheus.rule_files).toEqual(['/etc/prometheus/alerts.yml']);
  });

  it('Grafana: the Prometheus data source of the compose stack, the dashboards folder mounted, every panel on that data source', () => {
    expect(datasources.datasources).toEqual([
      expect.objectContaining({ uid: 'prometheus', type: 'prometheus', url: 'http://prometheus:9090' }),
    ]);
    expect(providers.providers[0]!.options.path).toBe('/var/lib/grafana/dashboards');
    expect(compose).toContain(`GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH: /var/lib/grafana/dashboards/device-registry.json`);
    for (const p of panels) {
      expect(p.datasource.uid, p.title).toBe('prometheus');
      expect(p.targets.length, p.title).toBeGreaterThan(0);
      expect(p.description.length, p.title).toBeGreaterThan(20);
    }
    // Panels do not overlap on the 24-column grid.
    const cells = new Set<string>();
    for (const p of panels) {
      expect(p.gridPos.x + p.gridPos.w, p.title).toBeLessThanOrEqual(24);
      for (let x = p.gridPos.x; x < p.gridPos.x + p.gridPos.w; x++)
        for (let y = p.gridPos.y; y < p.gridPos.y + p.gridPos.h; y++) {
          expect(cells.has(`${x},${y}`), `${p.title} overlaps`).toBe(false);
          cells.add(`${x},${y}`);
        }
    }
  });

  it('the dashboard shows ingest in and stored, drops by reason, pending, commit time, ack latency, HTTP rate and latency by route, errors, memory, event-loop lag', () => {
    const uses = (title: RegExp, ...metrics: string[]) => {
      const panel = panels.find((p) => title.test(p.title));
      expect(panel, String(title)).toBeDefined();
      const used = panel!.targets.flatMap((t) => metricNames(t.expr));
      for (const m of metrics) expect(used, `${panel!.title} uses ${m}`).toContain(m);
      return panel!;
    };
    uses(/^Ingest rate/, 'ingest_messages_received_total', 'ingest_messages_stored_total');
    expect(uses(/^Drops by reason/, 'ingest_dropped_total').targets[0]!.expr).toMatch(/by \(reason\)/);
    uses(/^Pending/, 'ingest_queue_depth');
    uses(/^Commit time/, 'ingest_publish_to_commit_seconds_bucket');
    uses(/^Ack latency/, 'ingest_ack_latency_seconds_bucket');
    expect(uses(/^HTTP rate by route/, 'http_requests_total').targets[0]!.expr).toMatch(/by \(route\)/);
    expect(uses(/^HTTP latency by route/, 'http_request_duration_seconds_bucket').targets[0]!.expr).toMatch(/by \(le, route\)/);
    expect(uses(/^HTTP errors/, 'http_requests_total').targets[0]!.expr).toContain('status=~"5.."');
    uses(/^Memory/, 'process_resident_memory_bytes', 'process_memory_limit_bytes');
    uses(/^Event-loop lag/, 'nodejs_eventloop_lag_p99_seconds');
  });

  it('the rules alert on ingest stalled, drops rising, database down, event loop lagging, memory near its limit', () => {
    const names = rules.map((r) => r.alert);
    expect(names).toEqual(
      expect.arrayContaining(['IngestStalled', 'IngestDropsRising', 'DatabaseDown', 'EventLoopLagging', 'MemoryNearLimit']),
    );
    const rule = (name: string) => rules.find((r) => r.alert === name)!;
    // The readiness check's verdict (drops are acknowledged too, so no acknowledgement rate tells a stall: alert-rules.test.ts).
    expect(rule('IngestStalled').expr).toBe('health_check_up{check="ingest"} == 0');
    expect(metricNames(rule('IngestDropsRising').expr)).toEqual(
      expect.arrayContaining(['ingest_dropped_total', 'ingest_messages_received_total']),
    );
    expect(rule('DatabaseDown').expr).toBe('health_check_up{check="database"} == 0');
    expect(metricNames(rule('EventLoopLagging').expr)).toEqual(['nodejs_eventloop_lag_p99_seconds']);
    expect(metricNames(rule('MemoryNearLimit').expr)).toEqual(['process_resident_memory_bytes', 'process_memory_limit_bytes']);
    for (const r of rules) {
      expect(r.for, r.alert).toMatch(/^\d+[smh]$/);
      expect(['critical', 'warning'], r.alert).toContain(r.labels.severity);
      expect(r.annotations.summary.length, r.alert).toBeGreaterThan(10);
      expect(r.annotations.description.length, r.alert).toBeGreaterThan(30);
      // Balanced brackets: a typo in an expression would only show once Prometheus loads it.
      let depth = 0;
      for (const c of r.expr) {
        depth += c === '(' ? 1 : c === ')' ? -1 : 0;
        expect(depth, r.alert).toBeGreaterThanOrEqual(0);
      }
      expect(depth, r.alert).toBe(0);
    }
  });

  it('reads metric names out of PromQL', () => {
    expect(
      metricNames(
        'histogram_quantile(0.99, sum by (le, route) (rate(http_request_duration_seconds_bucket{status=~"5.."}[$__rate_interval])))',
      ),
    ).toEqual(['http_request_duration_seconds_bucket']);
    expect(metricNames('sum(ingest_queue_depth) > 0 and sum(rate(ingest_messages_acknowledged_total[2m])) == 0')).toEqual([
      'ingest_queue_depth',
      'ingest_messages_acknowledged_total',
    ]);
    expect(metricNames('up{job="device-registry"} == 0')).toEqual(['up']);
  });
});

describe('after a short ingest', () => {
  // The embedded broker: the devices' PUBACK waits for the commit, so ack latency is measured.
  const svc = useService({ MQTT_URL: undefined });
  let scrape = '';
  const tenant = `obs${crypto.randomBytes(3).toString('hex')}`;

  beforeAll(async () => {
    const token = await tenantToken(svc.base, svc.token, tenant);
    const t = await createTemplate(svc.base, token, {
      label: 'meter',
      attrs: [{ label: 'power', type: 'dynamic', value_type: 'float' }],
    });
    const ids = (await createDevices(svc.base, token, { label: 'meter', templates: [t.id] }, '?count=3')).map((x) => x.id);
    for (const id of ids) {
      const device = await deviceClient(`mqtt://127.0.0.1:${svc.service.mqttPort}`, { username: `${tenant}:${id}` });
      for (let i = 0; i < 20; i++) await device.publishAsync(`${tenant}:${id}/attrs`, JSON.stringify({ power: i, unknown: 1 }), { qos: 1 });
      await device.endAsync();
    }
    await http('GET', `${svc.base}/no/such/route`, { token });
    // The router thread reports every 250 ms.
    scrape = await eventually(async () => {
      const text = (await http('GET', `${svc.base}/metrics`)).text;
      return sample(text, 'ingest_publish_to_commit_seconds_count') >= 60 && sample(text, 'ingest_ack_latency_seconds_count') >= 60
        ? text
        : undefined;
    }, 'the ingest figures');
  }, 60_000);

  it('every metric the dashboard and the rules use is in /metrics (with the label values they select)', () => {
    const fams = families(scrape);
    const used = [...new Set(expressions.flatMap(metricNames))].filter((n) => n !== 'up'); // `up` is Prometheus's own
    expect(used.length).toBeGreaterThan(15);
    for (const name of used) expect(exists(name, fams), `${name} is not in /metrics`).toBe(true);
    for (const { name, label, value } of expressions.flatMap(matchers)) {
      if (name === 'up') continue;
      expect(scrape, `${name}{${label}="${value}"}`).toMatch(new RegExp(`^${name}\\{[^}]*${label}="${value}"`, 'm'));
    }
  });

  it('with live figures: messages in, stored, acknowledged; latencies; the link up; ready', () => {
    expect(sample(scrape, 'ingest_messages_received_total')).toBe(60);
    expect(sample(scrape, 'ingest_messages_stored_total')).toBe(60);
    expect(sample(scrape, 'ingest_messages_acknowledged_total')).toBe(60);
    expect(scrape).toMatch(/^ingest_dropped_total\{reason="unknown_key"\} 60$/m);
    expect(sample(scrape, 'ingest_ack_latency_seconds_sum')).toBeGreaterThan(0);
    expect(sample(scrape, 'broker_link_up')).toBe(1);
    expect(sample(scrape, 'health_ready')).toBe(1);
    expect(scrape).toMatch(/^health_check_up\{check="database"\} 1$/m);
    expect(sample(scrape, 'db_pool_connections_max')).toBe(10);
    expect(sample(scrape, 'process_memory_limit_bytes')).toBeGreaterThan(0);
    expect(scrape).toMatch(/^http_requests_total\{method="GET",route="<unmatched>",status="404"\} 1$/m);
  });

  it('names follow Prometheus conventions: counters end in _total, durations in _seconds, sizes in _bytes', () => {
    // Only counters end in _total, as promtool check metrics requires (before, found by an audit,
    // prom-client's three nodejs_active_*_total gauges were exported and failed it).
    for (const [name, type] of families(scrape)) {
      if (type === 'counter') expect(name, name).toMatch(/_total$/);
      else expect(name, name).not.toMatch(/_total$/);
      if (/duration|latency|lag|_time/.test(name) && type !== 'counter')
        expect(name, name).toMatch(/_seconds$|_time_seconds$|_version_info$/);
      if (/memory|heap|size/.test(name) && !/cache|batch_rows/.test(name)) expect(name, name).toMatch(/_bytes$|_seconds$|_devices$/);
    }
  });

  it('docs/operations.md describes every metric of /metrics', () => {
    const doc = readRepoFile('docs/operations.md');
    const missing = [...families(scrape).keys()].filter((name) => !doc.includes(`\`${name}\``));
    expect(missing).toEqual([]);
  });

  it("section 8's metric tables list exactly the metrics of /metrics, each with its type", () => {
    // The tables, not the whole document: a name mentioned in another section (sizing, alerts)
    // is no description, and a metric the tables list must be one the service exports.
    const doc = readRepoFile('docs/operations.md');
    const section = /^### Metrics$([\s\S]*?)^## 9\./m.exec(doc)?.[1] ?? '';
    const listed = new Map([...section.matchAll(/^\| `([a-z_0-9]+)` \| ([a-z]+) \|/gm)].map((m) => [m[1]!, m[2]!]));
    expect(listed.size).toBeGreaterThan(40);
    expect(Object.fromEntries([...listed].sort())).toEqual(Object.fromEntries([...families(scrape)].sort()));
  });
});
